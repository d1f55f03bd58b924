#!/bin/sh
# An object compiled for one instruction set (-mavx2, -mavx512vnni) must
# define no weak symbol: an inline function or template instance it emitted
# could be the copy the linker keeps for every caller, and a CPU without that
# instruction set would then die of SIGILL in code that never asked for it.
# Usage: isa_objects_define_no_weak_symbols.sh OBJECT...
status=0
for object in "$@"; do
  weak=$(nm -C --defined-only "$object" | awk '$2 == "W" || $2 == "V" || $2 == "u"')
  if [ -n "$weak" ]; then
    printf '%s defines weak symbols:\n%s\n' "$object" "$weak"
    status=1
  fi
done
[ "$#" -gt 0 ] || { echo "no objects given"; exit 1; }
[ "$status" = 0 ] && echo "$# instruction-set objects, no weak symbols"
exit "$status"
