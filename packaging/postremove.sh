#!/bin/sh
# fednet package: after removal. Reloads systemd; /var/lib/fednet and
# /etc/fednet stay unless purged.
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
  rm -rf /var/lib/fednet /etc/fednet
fi
exit 0
