#!/usr/bin/env bash
# apt-install.sh [APT-GET-OPTION...] PACKAGE...: install Debian packages
# for make test, waiting for another apt-get (a second make test, the
# system's updater) to let go of apt's locks instead of failing on them:
# apt-get update has no lock timeout of its own, so it is retried while the
# lists lock is held, for up to 10 minutes; the install waits on dpkg's lock
# through DPkg::Lock::Timeout.
set -euo pipefail
for _ in $(seq 120); do
	if out=$(apt-get update -qq 2>&1); then
		break
	fi
	case "$out" in
	*"Could not get lock"*) sleep 5 ;;
	*) echo "$out" >&2; exit 1 ;;
	esac
done
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
