#!/bin/sh
# fednet package: before removal (not upgrade). Stops the daemons; the
# agent's tunnels stay (`fednet agent --data-dir /var/lib/fednet/agent --down`
# removes them). State under /var/lib/fednet is kept.
set -e
case "$1" in
  upgrade|1) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
  systemctl disable --now fednet-manager.service fednet-agent.service >/dev/null 2>&1 || true
fi
exit 0
