# Sourced by the install-*.sh scripts: `apt_install PACKAGE` installs one Debian package
# without recommends, as root or through sudo, waiting up to 5 minutes for another apt to finish
# (tests may install tools concurrently).
apt_install() {
    local package="$1" policy
    local sudo_cmd=()
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
    export DEBIAN_FRONTEND=noninteractive
    # Only refresh the package lists when apt does not know the package (a fresh image): an
    # update costs tens of seconds and the lists are usually there.
    # (Read into a variable first: `grep -q` in a pipe under pipefail fails on apt's SIGPIPE.)
    policy="$(apt-cache policy "$package" 2>/dev/null || true)"
    if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
        echo "apt does not know $package: apt-get update" >&2
        "${sudo_cmd[@]}" apt-get update -qq
    fi
    "${sudo_cmd[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "$package" >/dev/null
}
