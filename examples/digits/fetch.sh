#!/bin/sh
# Fetch the handwritten digits data set that Debian's python3-sklearn ships
# (sklearn/datasets/data/digits.csv.gz: 1797 rows of 64 pixel values 0..16,
# then the label) without installing scikit-learn: the package is downloaded
# with `apt-get download` and unpacked with `dpkg -x` in a temporary
# directory. Prints the path of the cached file as its last line.
#
#   examples/digits/fetch.sh [CACHE_DIR]     (default: examples/digits/.data,
#                                             or $DIGITS_CACHE)
# Exit status: 0 with the file in place; 2 when it cannot be had (no network,
# no apt); 1 on other errors.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-${DIGITS_CACHE:-$here/.data}}
member=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)   # absolute: the download runs in another directory
file=$dest/digits.csv.gz

if [ -s "$file" ] && gzip -t "$file" 2>/dev/null; then
	echo "$file"
	exit 0
fi

if [ -f "/$member" ]; then
	# scikit-learn is installed: use its copy
	cp "/$member" "$file.tmp"
	mv "$file.tmp" "$file"
	echo "$file"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
	echo "fetch.sh: apt-get and dpkg are needed to download python3-sklearn" >&2
	exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/digits-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"
if ! apt-get download python3-sklearn >download.log 2>&1; then
	# the package lists may be missing or stale; refreshing them needs root
	apt-get update >update.log 2>&1 || true
	if ! apt-get download python3-sklearn >download.log 2>&1; then
		echo "fetch.sh: apt-get download python3-sklearn failed:" >&2
		tail -n 3 download.log >&2
		exit 2
	fi
fi
deb=$(ls python3-sklearn_*.deb 2>/dev/null | head -n 1)
if [ -z "$deb" ]; then
	echo "fetch.sh: apt-get download left no python3-sklearn_*.deb" >&2
	exit 2
fi
dpkg -x "$deb" x
if [ ! -s "x/$member" ] || ! gzip -t "x/$member"; then
	echo "fetch.sh: $deb holds no usable $member" >&2
	exit 1
fi
cp "x/$member" "$file.tmp"
mv "$file.tmp" "$file"
echo "$file"
