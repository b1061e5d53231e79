// kevo::records — tuning records: every measurement in an SQLite database, warm starts, a recorder.
#pragma once
#include "kevo/records/database.hpp"
#include "kevo/records/recorder.hpp"
#include "kevo/records/transfer.hpp"
