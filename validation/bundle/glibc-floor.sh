#!/usr/bin/env bash
# The newest glibc a bundle needs: objdump -T over every ELF file in it (programs, libraries, plugins),
# the highest GLIBC_x.y version any symbol asks for. With MAX, every symbol newer than MAX is listed
# (file, symbol, version) and the exit is 1.
#   validation/bundle/glibc-floor.sh BUNDLE [MAX]     e.g. build/bundle-bullseye/avtrain-bundle 2.31
set -euo pipefail
bundle=${1:?usage: glibc-floor.sh BUNDLE [MAX]}
max=${2:-}
[[ -d $bundle ]] || { echo "glibc-floor: $bundle: no such folder" >&2; exit 2; }
command -v objdump > /dev/null || { echo "glibc-floor: objdump is missing (binutils)" >&2; exit 2; }
newer() { [[ $1 != "$2" && $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1) == "$1" ]]; }  # newer A B: A > B

table=$(mktemp)
trap 'rm -f "$table"' EXIT
files=0
while IFS= read -r -d '' f; do
  [[ $(LC_ALL=C head -c 4 "$f") == $'\x7fELF' ]] || continue  # ELF files only
  files=$((files + 1))
  # Dynamic symbols with a glibc version: "... (GLIBC_2.34) name" or "... GLIBC_2.34 name".
  objdump -T "$f" | sed -nE "s/.*[ (]GLIBC_([0-9]+\.[0-9]+(\.[0-9]+)?)\)? +([^ ]+)$/\1 \3/p" |
    while read -r version symbol; do echo "$version ${f#$bundle/} $symbol"; done >> "$table"
done < <(find "$bundle" -type f -print0)
(( files > 0 )) || { echo "glibc-floor: no ELF file in $bundle" >&2; exit 2; }
[[ -s $table ]] || { echo "glibc-floor: no glibc symbol in $files ELF files of $bundle" >&2; exit 2; }
floor=$(cut -d' ' -f1 "$table" | sort -uV | tail -1)
echo "glibc-floor: $files ELF files in $bundle need glibc >= $floor (GLIBC_$floor:" \
     "$(awk -v v="$floor" '$1 "" == v {print $2 " " $3}' "$table" | sort -u | head -3 | tr '\n' ';' | sed 's/;$//; s/;/; /g'))"
[[ -n $max ]] || exit 0
offenders=0
while read -r version file symbol; do
  if newer "$version" "$max"; then
    (( offenders == 0 )) && echo "glibc-floor: newer than GLIBC_$max:"
    echo "  $file: $symbol (GLIBC_$version)"
    offenders=$((offenders + 1))
  fi
done < <(sort -u "$table" | sort -k1,1V -k2,2)
if (( offenders > 0 )); then echo "glibc-floor: FAILED: $offenders symbols newer than GLIBC_$max"; exit 1; fi
echo "glibc-floor: nothing newer than GLIBC_$max"
