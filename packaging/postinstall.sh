#!/bin/sh
# fednet package: after install or upgrade. Creates the manager's system
# user and tells systemd about the units. It enables and starts nothing:
# the operator configures /etc/fednet/*.env first (docs/deploy.md).
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers /usr/lib/sysusers.d/fednet.conf
elif ! getent passwd fednet >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/fednet/manager --no-create-home --shell /usr/sbin/nologin fednet
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  # An upgrade restarts what runs. The agent's tunnels survive a restart
  # (KillMode=process keeps the userspace WireGuard device).
  for unit in fednet-manager.service fednet-agent.service; do
    systemctl try-restart "$unit" >/dev/null 2>&1 || true
  done
fi
exit 0
