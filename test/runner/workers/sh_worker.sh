#!/bin/sh
# A ProcessRunner worker in POSIX sh, for the tests of the candidate timeout itself: a shell
# starts in milliseconds even on a loaded machine, where python3 can take over a second, so the
# timeout those tests measure is spent on the behaviour under test, not on interpreter start-up.
# It forks nothing per request (parameter expansion only). The request's "schedule" text carries
#   mode=ok            answer ok (5 samples)
#   mode=hang          read the request, then sleep an hour
#   mode=hang_group    start a sleeping child in this process group, write its pid to pidfile=PATH, sleep
#   mode=slow_garbage  sleep delay=SECONDS, then print a line that is not JSON
#   mode=orphan_exit   start a sleeping child that keeps stdout open, write its pid to pidfile=PATH,
#                      then exit with status 4 without answering
#   mode=answer_exit   answer ok, leave a sleeping child holding stdout, and exit 0
# Protocol: docs/PROTOCOL.md.
while IFS= read -r line; do
  rest=${line#*\"id\":}
  id=${rest%%[,\}]*}
  case "$line" in
    *mode=hang_group*)
      pidfile=${line#*pidfile=}
      pidfile=${pidfile%%[\" ]*}
      sleep 3600 &
      echo $! >"$pidfile"
      sleep 3600
      ;;
    *mode=hang*) sleep 3600 ;;
    *mode=orphan_exit*)
      pidfile=${line#*pidfile=}
      pidfile=${pidfile%%[\" ]*}
      sleep 3600 &
      echo $! >"$pidfile"
      exit 4
      ;;
    *mode=answer_exit*)
      printf '{"v":1,"id":%s,"status":"ok","latency_ns":[7,7,7,7,7],"message":"","profile":"sh worker"}\n' "$id"
      sleep 3600 &
      exit 0
      ;;
    *mode=slow_garbage*)
      delay=${line#*delay=}
      delay=${delay%%[\" ]*}
      sleep "$delay"
      echo "still compiling..."
      ;;
    *) printf '{"v":1,"id":%s,"status":"ok","latency_ns":[1000,1001,1002,1003,1004],"message":"","profile":"sh worker"}\n' "$id" ;;
  esac
done
