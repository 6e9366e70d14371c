package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func newKeygenCmd() *cobra.Command {
	var path string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --key FILE",
		Short: "Create a gateway's WireGuard private key and print its public key",
		Long: `Keygen creates a new WireGuard private key, writes it to FILE (mode 0600, the
same base64 form as "wg genkey") and prints the public key. Run it on the
gateway itself: the private key never leaves the machine; put the public key
into the spec (gateways[].publicKey) or let the manager learn it.`,
		Example: "  fednet keygen --key /etc/fednet/private.key",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("--key FILE is required: where to write the private key")
			}
			k, err := wgtypes.GeneratePrivateKey()
			if err != nil {
				return fmt.Errorf("generating key: %w", err)
			}
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			fh, err := os.OpenFile(path, flags, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("--key %s exists; refusing to overwrite a key (use --force to replace it)", path)
			}
			if err != nil {
				return fmt.Errorf("writing key: %w", err)
			}
			if err := fh.Chmod(0o600); err != nil {
				fh.Close()
				return fmt.Errorf("writing key: %w", err)
			}
			if _, err := fmt.Fprintln(fh, k.String()); err != nil {
				fh.Close()
				return fmt.Errorf("writing key: %w", err)
			}
			if err := fh.Close(); err != nil {
				return fmt.Errorf("writing key: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.PublicKey().String())
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "key", "", "private key file to create")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key file")
	return cmd
}

func newPubkeyCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "pubkey --key FILE",
		Short: "Print the public key of a private key file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := readPrivateKey(path)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.PublicKey().String())
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "key", "", "private key file (from fednet keygen or wg genkey)")
	return cmd
}

// readPrivateKey reads a base64 WireGuard private key file and warns about
// loose permissions.
func readPrivateKey(path string) (wgtypes.Key, error) {
	if path == "" {
		return wgtypes.Key{}, errors.New("--key FILE is required (create one with: fednet keygen --key FILE)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("reading --key: %w", err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("--key %s does not hold a WireGuard key (base64 of 32 bytes, as fednet keygen writes): %w", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(os.Stderr, "fednet: warning: %s is readable by others (mode %v); chmod 600 it\n", path, st.Mode().Perm())
	}
	return k, nil
}
