package packaging

import (
	"bytes"
	"context"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			// make deps installs them as root, as CI runs: a missing one
			// there is a missing install step, not a reason to skip.
			if os.Geteuid() == 0 {
				t.Fatalf("%s is not installed; run make deps (it installs it)", tool)
			}
			t.Skipf("%s is not installed (make deps installs it as root; CI has it)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestPackageInstalls builds both packages with `make package`, unpacks
// the .deb into a throwaway root and checks the files, their modes, the
// units (systemd-analyze verify and security), the maintainer scripts and
// the binary; and the .rpm's file list and modes.
func TestPackageInstalls(t *testing.T) {
	need(t, "make", "dpkg-deb", "systemd-analyze")
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	mk := exec.CommandContext(ctx, "make", "-s", "-C", "..", "package", "PKG_DIR="+out, "VERSION=1.2.3")
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "fednet_1.2.3-1_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(out, "fednet-1.2.3-1.*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package made %v and %v; want one .deb and one .rpm", debs, rpms)
	}
	deb := debs[0]
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, root)
	if got := run(t, "dpkg-deb", "-f", deb, "Package", "Version"); got != "Package: fednet\nVersion: 1.2.3-1\n" {
		t.Errorf("control: %q", got)
	}

	files := map[string]fs.FileMode{
		"/usr/bin/fednet": 0o755,
		"/usr/lib/systemd/system/fednet-manager.service": 0o644,
		"/usr/lib/systemd/system/fednet-agent.service":   0o644,
		"/usr/lib/sysusers.d/fednet.conf":                0o644,
		"/etc/fednet":                                    fs.ModeDir | 0o700,
		"/etc/fednet/manager.env":                        0o600,
		"/etc/fednet/agent.env":                          0o600,
		"/usr/share/man/man1/fednet.1.gz":                0o644,
		"/usr/share/man/man1/fednet-agent.1.gz":          0o644,
		"/usr/share/man/man1/fednet-cloud-apply.1.gz":    0o644,
		"/usr/share/doc/fednet/copyright":                0o644,
	}
	for path, mode := range files {
		st, err := os.Lstat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("the package lacks %s", path)
			continue
		}
		if got := st.Mode() & (fs.ModeDir | fs.ModeType | fs.ModePerm); got != mode {
			t.Errorf("%s: mode %v, want %v", path, got, mode)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(root, "/usr/share/man/man1/*.1.gz"))
	if len(pages) < 30 {
		t.Errorf("%d man pages, want one per command (30 or more)", len(pages))
	}

	// The binary: static (no interpreter, so it runs on any distribution)
	// and it runs.
	bin := filepath.Join(root, "usr/bin/fednet")
	if e, err := elf.Open(bin); err != nil {
		t.Errorf("%s: %v", bin, err)
	} else {
		for _, p := range e.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("/usr/bin/fednet is dynamically linked; make package builds it with CGO_ENABLED=0")
			}
		}
		e.Close()
	}
	if help := run(t, bin, "cloud", "--help"); !strings.Contains(help, "fednet cloud plan") {
		t.Errorf("fednet cloud --help from the package:\n%s", help)
	}

	// Conffiles keep the operator's settings on upgrade; the maintainer
	// scripts parse.
	ctl := t.TempDir()
	run(t, "dpkg-deb", "-e", deb, ctl)
	conffiles, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
	for _, c := range []string{"/etc/fednet/agent.env", "/etc/fednet/manager.env"} {
		if !strings.Contains(string(conffiles), c) {
			t.Errorf("conffiles lacks %s:\n%s", c, conffiles)
		}
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		p := filepath.Join(ctl, s)
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("maintainer script %s missing or not executable", s)
			continue
		}
		run(t, "sh", "-n", p)
	}

	units := map[string][]string{
		"fednet-manager.service": {"User=fednet", "CapabilityBoundingSet=\n", "StateDirectory=fednet/manager", "StateDirectoryMode=0700"},
		"fednet-agent.service":   {"CapabilityBoundingSet=CAP_NET_ADMIN\n", "KillMode=process", "StateDirectory=fednet/agent", "StateDirectoryMode=0700", "DeviceAllow=/dev/net/tun rw"},
	}
	verify := t.TempDir()
	for unit, want := range units {
		data, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system", unit))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range append(want, "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "UMask=0077", "EnvironmentFile=/etc/fednet/") {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s lacks %q", unit, w)
			}
		}
		// verify checks ExecStart's binary on this machine: point it at
		// the unpacked one.
		text := strings.ReplaceAll(string(data), "/usr/bin/fednet", bin)
		if err := os.WriteFile(filepath.Join(verify, unit), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths, _ := filepath.Glob(filepath.Join(verify, "*.service"))
	// verify exits 0 for a setting it ignores, so any output fails.
	cmd := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, paths...)...)
	if b, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(b)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, b)
	}
	level := regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+) (\S+)`)
	for unit := range units {
		b, _ := exec.Command("systemd-analyze", "security", "--offline=yes", "--root="+root, unit).CombinedOutput()
		m := level.FindStringSubmatch(string(b))
		if m == nil {
			t.Errorf("systemd-analyze security %s: no exposure level:\n%s", unit, b)
			continue
		}
		t.Logf("systemd-analyze security: %s exposure %s %s", m[1], m[2], m[3])
		if m[3] != "OK" {
			t.Errorf("%s: exposure %s %s; want OK (hardening lost?)", unit, m[2], m[3])
		}
	}

	t.Run("rpm", func(t *testing.T) {
		need(t, "rpm")
		dump := run(t, "rpm", "-qp", "--dump", rpms[0])
		for path, mode := range map[string]string{"/usr/bin/fednet": "0100755", "/etc/fednet/agent.env": "0100600", "/etc/fednet/manager.env": "0100600", "/usr/lib/systemd/system/fednet-agent.service": "0100644", "/etc/fednet": "040700"} {
			re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(path) + ` \d+ \d+ \S+ (\d+) `)
			m := re.FindStringSubmatch(dump)
			if m == nil || m[1] != mode {
				t.Errorf("rpm: %s: mode %v, want %s", path, m, mode)
			}
		}
		if cfg := run(t, "rpm", "-qcp", rpms[0]); !strings.Contains(cfg, "/etc/fednet/agent.env") {
			t.Errorf("rpm config files:\n%s", cfg)
		}
		if scripts := run(t, "rpm", "-qp", "--scripts", rpms[0]); !strings.Contains(scripts, "systemd-sysusers") {
			t.Errorf("rpm scripts lack the user creation:\n%s", scripts)
		}
	})
}
