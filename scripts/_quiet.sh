# Sourced by the set-up scripts: run installers quietly, and say everything when they fail.
#
#   quietly apt-get install -y docker.io
#
# The command's output goes to a temporary file, shown (on stderr) only if it fails.

quietly() {
  local out status=0
  out=$(mktemp)
  "$@" >"$out" 2>&1 || status=$?
  if ((status != 0)); then
    echo "failed ($status): $*" >&2
    cat "$out" >&2
  fi
  rm -f "$out"
  return "$status"
}

# apt-get install PACKAGES..., quietly, with the package lists refreshed once per run. Another
# installer holding dpkg's lock (a parallel set-up) is waited for, bounded, instead of failing.
apt_install() {
  local lock=(-o "DPkg::Lock::Timeout=${OSRDYNE_APT_LOCK_WAIT_SECONDS:-600}")
  if [[ -z "${_OSRDYNE_APT_UPDATED:-}" ]]; then
    quietly apt-get "${lock[@]}" update
    export _OSRDYNE_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive quietly apt-get "${lock[@]}" install -y --no-install-recommends "$@"
}
