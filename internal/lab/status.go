package lab

import (
	"fmt"
	"strings"
)

// State is what exists of a lab on this machine, as Status reports it.
type State struct {
	Name string
	// Dir is the default state directory if it exists, else empty.
	Dir string
	// Namespaces are the lab's network namespaces, sorted by name.
	Namespaces []NamespaceState
}

// NamespaceState is one lab namespace and the processes running in it.
type NamespaceState struct {
	Name      string
	Processes []ProcessInfo
}

// ProcessInfo is a process found in a lab namespace.
type ProcessInfo struct {
	PID int
	// Command is the process's command line.
	Command string
}

// Exists reports whether anything of the lab is left.
func (s State) Exists() bool { return len(s.Namespaces) > 0 || s.Dir != "" }

// String renders the state for people, one namespace per line with its
// processes indented below.
func (s State) String() string {
	if !s.Exists() {
		return fmt.Sprintf("lab %s: nothing exists\n", s.Name)
	}
	var b strings.Builder
	procs := 0
	for _, ns := range s.Namespaces {
		procs += len(ns.Processes)
	}
	fmt.Fprintf(&b, "lab %s: %d namespaces, %d processes", s.Name, len(s.Namespaces), procs)
	if s.Dir != "" {
		fmt.Fprintf(&b, ", state in %s", s.Dir)
	}
	b.WriteString("\n")
	for _, ns := range s.Namespaces {
		fmt.Fprintf(&b, "  %s\n", ns.Name)
		for _, p := range ns.Processes {
			fmt.Fprintf(&b, "    %d %s\n", p.PID, p.Command)
		}
	}
	return b.String()
}
