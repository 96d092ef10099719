# Shell functions shared by the scripts that build cached Debian roots (sourced, not run).

# The Debian mirror apt already uses (deb822 .sources or a classic sources.list), so roots
# and source packages come from where this machine's packages come from.
debian_mirror() {
  local m
  m=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]*$/\1/p' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [ -n "$m" ] || m=$(awk '$1=="deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' \
                       /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# debootstrap_root NAME ROOT PKGS [ARCH]: a Debian 11 "bullseye" minbase root with PKGS
# (comma-separated) at ROOT, built in a temporary directory and renamed when complete;
# prints ROOT. Does nothing when ROOT exists and was made with the same PKGS. A foreign
# ARCH is made with --foreign (downloads and unpacks, runs nothing of that machine) plus
# `dpkg -x` of the included packages, which --foreign leaves packed.
debootstrap_root() {
  local name=$1 root=$2 pkgs=$3 arch=${4:-} stamp="$2/.elflayout-root" mirror tmp
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkgs" ]; then
    echo "$root"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || { echo "$name: debootstrap needs root" >&2; return 2; }
  command -v debootstrap >/dev/null || { echo "$name: debootstrap is not installed (scripts/bootstrap.sh)" >&2; return 2; }
  mirror=$(debian_mirror)
  mkdir -p "$(dirname "$root")"
  tmp=$(mktemp -d "$root.tmp.XXXXXX")
  # shellcheck disable=SC2064  # expand now: tmp is local
  trap "rm -rf '$tmp' '$tmp.log'" EXIT
  local args=(--variant=minbase --include="$pkgs")
  [ -z "$arch" ] || args+=(--arch="$arch" --foreign)
  echo "$name: debootstrap ${args[*]} bullseye from $mirror (a few minutes)" >&2
  debootstrap "${args[@]}" bullseye "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
    tail -5 "$tmp.log" >&2; return 1; }
  if [ -n "$arch" ]; then
    for f in "$tmp"/var/cache/apt/archives/*.deb; do dpkg -x "$f" "$tmp"; done
    rm -rf "$tmp"/var/cache/apt/archives/*.deb
  fi
  echo "$pkgs" >"$tmp/.elflayout-root"
  rm -rf "$root"
  mv -T "$tmp" "$root"
  rm -f "$tmp.log"
  trap - EXIT
  echo "$root"
}
