package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/atomicfile"
	"github.com/fednet/fednet/internal/plan"
)

// Files of a managed agent's data directory.
const (
	// KeyFile holds the gateway's WireGuard private key (base64, as
	// "fednet keygen" writes it), mode 0600. It never leaves the machine.
	KeyFile = "private.key"
	// NewKeyFile holds the next private key during a key rotation, until
	// the manager has its public half.
	NewKeyFile = "private.key.new"
	// CredentialFile holds the Credential, mode 0600.
	CredentialFile = "credential.json"
	// PlanFile holds the last api.PlanResponse the agent took from the
	// manager (written just before it is applied), so that a restarted
	// agent restores its tunnels without the manager.
	PlanFile = "plan.json"
)

// Credential is what an agent keeps after enrollment (credential.json).
type Credential struct {
	// Manager is the manager's base URL.
	Manager string `json:"manager"`
	// Managers are the base URLs of every manager of the federation (from
	// the join token), Manager first; absent with one manager. The agent
	// fails over between them.
	Managers []string `json:"managers,omitempty"`
	// CAFingerprint pins the manager's CA (from the join token).
	CAFingerprint string `json:"caFingerprint"`
	// Gateway is the gateway this agent is.
	Gateway string `json:"gateway"`
	// Credential is the bearer token of the gateway's calls.
	Credential string `json:"credential"`
	// Rotation is the last key rotation request answered (see
	// api.PlanResponse.RotateKey).
	Rotation int `json:"rotation"`
	// Enrolled is when the agent enrolled.
	Enrolled time.Time `json:"enrolled"`
}

// URLs are the managers' base URLs: Managers, or Manager alone.
func (c Credential) URLs() []string {
	if len(c.Managers) > 0 {
		return c.Managers
	}
	return []string{c.Manager}
}

// dataDir reads and writes the files of a managed agent's data directory.
// Every write is atomic (a temporary file renamed over the old one), so a
// crash leaves either the old or the new content.
type dataDir string

func (d dataDir) path(name string) string { return filepath.Join(string(d), name) }

// create makes the directory (mode 0700) if needed and warns through logf
// when an existing one is open to others.
func (d dataDir) create(logf func(string, ...any)) error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("creating --data-dir: %w", err)
	}
	st, err := os.Stat(string(d))
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--data-dir %s is not a directory", d)
	}
	if st.Mode().Perm()&0o077 != 0 {
		logf("warning: data directory %s is open to others (mode %v); chmod 700 it: it holds the private key and credential", d, st.Mode().Perm())
	}
	return nil
}

// write replaces the file name with data, atomically, with mode perm.
func (d dataDir) write(name string, data []byte, perm fs.FileMode) error {
	return atomicfile.Write(d.path(name), data, perm)
}

// readKey reads a private key file; ok is false when it does not exist.
func (d dataDir) readKey(name string) (k plan.Key, ok bool, err error) {
	data, err := os.ReadFile(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return k, false, nil
	}
	if err != nil {
		return k, false, fmt.Errorf("reading private key: %w", err)
	}
	wk, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return k, false, fmt.Errorf("%s does not hold a WireGuard private key (base64 of 32 bytes): %w", d.path(name), err)
	}
	return plan.Key(wk), true, nil
}

// newKey generates a private key and writes it to name (mode 0600).
func (d dataDir) newKey(name string) (plan.Key, error) {
	wk, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return plan.Key{}, fmt.Errorf("generating a WireGuard key: %w", err)
	}
	if err := d.write(name, []byte(wk.String()+"\n"), 0o600); err != nil {
		return plan.Key{}, err
	}
	return plan.Key(wk), nil
}

// publicKey returns the public half of a private key.
func publicKey(priv plan.Key) plan.Key { return plan.Key(wgtypes.Key(priv).PublicKey()) }

// readCredential reads credential.json; nil when it does not exist.
func (d dataDir) readCredential() (*Credential, error) {
	data, err := os.ReadFile(d.path(CredentialFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading credential: %w", err)
	}
	var c Credential
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s is damaged (%w); delete it and enroll again with a new join token", d.path(CredentialFile), err)
	}
	if c.Manager == "" || c.CAFingerprint == "" || c.Gateway == "" || c.Credential == "" {
		return nil, fmt.Errorf("%s is incomplete (manager, caFingerprint, gateway and credential are all needed); delete it and enroll again with a new join token", d.path(CredentialFile))
	}
	return &c, nil
}

func (d dataDir) writeCredential(c Credential) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding credential: %w", err)
	}
	return d.write(CredentialFile, append(data, '\n'), 0o600)
}

// readPlan reads the cached plan; nil when there is none.
func (d dataDir) readPlan() (*api.PlanResponse, error) {
	data, err := os.ReadFile(d.path(PlanFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading cached plan: %w", err)
	}
	var p api.PlanResponse
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("cached plan %s is damaged: %w", d.path(PlanFile), err)
	}
	if p.Plan.Name == "" {
		return nil, fmt.Errorf("cached plan %s names no gateway", d.path(PlanFile))
	}
	return &p, nil
}

func (d dataDir) writePlan(p *api.PlanResponse) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding plan: %w", err)
	}
	return d.write(PlanFile, append(data, '\n'), 0o600)
}

// LoadCachedPlan returns the plan a managed agent last applied, from its
// data directory (for "fednet agent --data-dir DIR --down").
func LoadCachedPlan(dir string) (*api.PlanResponse, error) {
	p, err := dataDir(dir).readPlan()
	if err == nil && p == nil {
		err = fmt.Errorf("no cached plan in %s: the agent never applied one", dir)
	}
	return p, err
}

// syncDir makes renames in the directory durable; failures only weaken
// durability, so they are ignored.
func (d dataDir) syncDir() {
	if f, err := os.Open(string(d)); err == nil {
		f.Sync()
		f.Close()
	}
}
