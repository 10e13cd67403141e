#!/usr/bin/env bash
# scripts/fetch-source.sh PACKAGE VERSION DEST: unpacks Debian's source package PACKAGE=VERSION
# into DEST (which must not exist yet). Adds deb-src entries for bookworm, trixie and sid once.
#
# The archive here does not always serve every file its index lists (seen: the .dsc and the
# Debian tarball answer 404 while the upstream tarball is served), so apt-get source can fail
# although the source is there: then the upstream tarball alone is unpacked (apt checks it
# against the index's SHA256), and a note says so. Exit status 2, with the archive's answer on
# stderr, when neither came.
set -euo pipefail
pkg=$1 ver=$2 dest="$(realpath -m "$3")"   # absolute: the fetch runs in a temporary folder
say() { echo "[fetch-source] $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

list=/etc/apt/sources.list.d/mlip-debsrc.sources
if ! grep -qs "Suites: bookworm trixie sid" "$list"; then
  say "adding deb-src entries for bookworm, trixie and sid (source packages only)"
  as_root tee "$list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  if ! as_root apt-get update -qq; then
    as_root rm -f "$list"    # so that the next run tries again
    echo "apt-get update failed with the deb-src entries added" >&2
    exit 2
  fi
fi

mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d "$(dirname "$dest")/.fetch-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
for attempt in 1 2; do
  if (cd "$tmp" && apt-get source --download-only -q "$pkg=$ver" >"$tmp/apt.log" 2>&1); then break; fi
  sleep 2
done
orig="$(compgen -G "$tmp/${pkg}_*.orig.tar.*" | head -n1 || true)"
if compgen -G "$tmp/*.dsc" >/dev/null && compgen -G "$tmp/*.debian.tar.*" >/dev/null &&
   (cd "$tmp" && dpkg-source -q -x ./*.dsc unpacked >"$tmp/dpkg-source.log" 2>&1); then
  mv "$tmp/unpacked" "$dest"
elif [ -n "$orig" ]; then
  if [ -f "$tmp/dpkg-source.log" ]; then
    say "note: dpkg-source could not unpack $pkg $ver ($(tail -n1 "$tmp/dpkg-source.log")); using the upstream tarball"
    rm -rf "$tmp/unpacked"
  fi
  [ -f "$tmp/dpkg-source.log" ] ||
    say "note: the archive served $pkg $ver's upstream tarball but not its .dsc/Debian patches (404); using the tarball"
  mkdir -p "$tmp/unpacked"
  tar -xf "$orig" -C "$tmp/unpacked"
  top=("$tmp"/unpacked/*)
  # Some tarballs have a top directory, some (lammps 20260704+dfsg) unpack flat.
  if [ ${#top[@]} -eq 1 ] && [ -d "${top[0]}" ]; then mv "${top[0]}" "$dest"; else mv "$tmp/unpacked" "$dest"; fi
else
  answer="$(grep -m1 -oE '(404 +Not Found|Unable to find[^[]*|Can.t find[^[]*)' "$tmp/apt.log" | tr -s ' ' || true)"
  echo "${answer:-$(tail -n1 "$tmp/apt.log")}" >&2
  exit 2
fi
