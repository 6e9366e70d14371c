package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/atomicfile"
	"github.com/fednet/fednet/internal/client"
)

// Environment variables the operator commands read.
const (
	envManager       = "FEDNET_MANAGER"
	envToken         = "FEDNET_TOKEN"
	envCAFingerprint = "FEDNET_CA_FINGERPRINT"
	envConfig        = "FEDNET_CONFIG"
)

// connection is where a manager is and how to authenticate to it; it is
// also the content of the config file "fednet login" writes.
type connection struct {
	Manager       string `json:"manager"`
	Token         string `json:"token"`
	CAFingerprint string `json:"caFingerprint"`
}

// configPath is $FEDNET_CONFIG, else ~/.config/fednet/config.json (or
// under $XDG_CONFIG_HOME).
func configPath() (string, error) {
	if p := os.Getenv(envConfig); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the config directory (set %s=FILE instead): %w", envConfig, err)
	}
	return filepath.Join(dir, "fednet", "config.json"), nil
}

// loadConfig reads the config file; a missing file is an empty connection.
func loadConfig(path string) (connection, error) {
	var c connection
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading config: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("config file %s is damaged (%w); run fednet login again", path, err)
	}
	return c, nil
}

// saveConfig writes c to path with mode 0600 (it holds the admin token),
// creating the directory with mode 0700; the write is atomic.
func saveConfig(path string, c connection) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding config: %w", err)
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	return nil
}

// connFlags are the flags of every command that talks to a manager.
type connFlags struct {
	manager, token, tokenFile, caFingerprint string
}

func (f *connFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.manager, "manager", "", "manager URL https://HOST:PORT, or the URLs of several managers of the federation comma-separated (default: $"+envManager+", then the config from fednet login)")
	cmd.Flags().StringVar(&f.token, "token", "", "admin token (default: $"+envToken+", then the config from fednet login; visible in ps, prefer --token-file)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the admin token, e.g. the manager's DATA_DIR/admin.token")
	cmd.Flags().StringVar(&f.caFingerprint, "ca-fingerprint", "", "hex SHA-256 of the manager's CA certificate (default: $"+envCAFingerprint+", then the config from fednet login)")
	cmd.MarkFlagsMutuallyExclusive("token", "token-file")
}

// adminToken is the token the flags give: --token, else the content of
// --token-file, else $FEDNET_TOKEN; "" when none does.
func (f *connFlags) adminToken() (string, error) {
	if f.tokenFile != "" {
		return readTokenFile(f.tokenFile)
	}
	return first(f.token, os.Getenv(envToken)), nil
}

// readTokenFile reads a token from a file (--token-file): its content
// without surrounding white space.
func readTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading --token-file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("--token-file %s is empty; it should hold the token on one line", path)
	}
	return tok, nil
}

// resolve finds the connection: each field from its flag, else its
// environment variable, else the config file.
func (f *connFlags) resolve() (connection, error) {
	tok, err := f.adminToken()
	if err != nil {
		return connection{}, err
	}
	c := connection{
		Manager:       first(f.manager, os.Getenv(envManager)),
		Token:         tok,
		CAFingerprint: first(f.caFingerprint, os.Getenv(envCAFingerprint)),
	}
	if c.Manager == "" || c.Token == "" || c.CAFingerprint == "" {
		path, err := configPath()
		if err != nil {
			return c, err
		}
		file, err := loadConfig(path)
		if err != nil {
			return c, err
		}
		c.Manager = first(c.Manager, file.Manager)
		c.Token = first(c.Token, file.Token)
		c.CAFingerprint = first(c.CAFingerprint, file.CAFingerprint)
		var missing []string
		for _, m := range []struct{ v, flag, env string }{
			{c.Manager, "--manager", envManager},
			{c.Token, "--token-file", envToken},
			{c.CAFingerprint, "--ca-fingerprint", envCAFingerprint},
		} {
			if m.v == "" {
				missing = append(missing, fmt.Sprintf("%s (or $%s)", m.flag, m.env))
			}
		}
		if len(missing) > 0 {
			return c, fmt.Errorf("no manager to talk to: missing %s and nothing in %s; "+
				"run: fednet login --manager https://HOST:PORT --token-file ADMIN_TOKEN_FILE --ca-fingerprint HEX, "+
				"or set %s, %s and %s", strings.Join(missing, ", "), path, envManager, envToken, envCAFingerprint)
		}
	}
	return c, nil
}

// client returns a client of the resolved manager.
func (f *connFlags) client() (*client.Client, error) {
	c, err := f.resolve()
	if err != nil {
		return nil, err
	}
	return newClient(c)
}

// newClient returns a client of c's managers: Manager is one URL, or the
// URLs of several managers of one federation, comma-separated (the client
// fails over between them).
func newClient(c connection) (*client.Client, error) {
	var urls []string
	for _, u := range strings.Split(c.Manager, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	cl, err := client.New(client.Config{URLs: urls, Token: c.Token, CAFingerprint: c.CAFingerprint})
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// first returns the first non-empty string.
func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
