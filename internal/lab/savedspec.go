package lab

import (
	"fmt"
	"os"
	"path/filepath"
)

// SpecFile is the file in a lab's state directory that holds the spec the
// lab was built from (as `fednet lab up` and the demo were given or
// generated it), so later commands can open the lab by its name alone.
const SpecFile = "spec.yaml"

// SaveSpec writes the lab's spec text into its state directory.
func (l *Lab) SaveSpec(text []byte) error {
	if err := os.WriteFile(filepath.Join(l.Dir, SpecFile), text, 0o600); err != nil {
		return fmt.Errorf("saving the spec of lab %q: %w", l.Name, err)
	}
	return nil
}

// SavedSpec returns the spec text saved with lab name (in its default
// state directory).
func SavedSpec(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(DefaultDir(name), SpecFile))
	if err != nil {
		return nil, fmt.Errorf("lab %q has no saved spec: %w", name, err)
	}
	return b, nil
}
