# Sourced by scripts/test, scripts/quickstart and .ci/run: makes sure the command-line tools
# they need are installed, installing the missing ones from the Debian packages.

# Whether TOOL can be run: on PATH, or in /usr/sbin, where Debian puts haproxy and which a
# normal user's PATH does not name.
have_tool() {
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]
}

# ensure_tools PACKAGE:TOOL... installs every PACKAGE whose TOOL is missing (`apt-get update`,
# then `apt-get install -y`; through sudo when not root), then fails naming any TOOL that is
# still missing. Nothing is installed when every tool is there.
ensure_tools() {
  local spec missing=()
  for spec in "$@"; do
    have_tool "${spec#*:}" || missing+=("${spec%%:*}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
      if ! command -v sudo >/dev/null 2>&1; then
        echo "missing ${missing[*]}, and neither root nor sudo to install them:" \
          "run 'apt-get install -y ${missing[*]}' as root" >&2
        return 1
      fi
      sudo=(sudo)
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "missing ${missing[*]}, and no apt-get to install them (a Debian machine is assumed)" >&2
      return 1
    fi
    echo "==> installing ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  local absent=()
  for spec in "$@"; do
    have_tool "${spec#*:}" || absent+=("${spec#*:}")
  done
  if [ ${#absent[@]} -gt 0 ]; then
    echo "still missing after installing: ${absent[*]}" >&2
    return 1
  fi
}
