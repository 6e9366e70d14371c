package spec

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one reason a spec was rejected.
type Problem struct {
	// Line is the 1-based line of the YAML document the problem is about, or
	// 0 when no line is known.
	Line int
	// Path names the field, in the form sites[1].gateways[0].endpoint; empty
	// for problems with the document as a whole.
	Path string
	// Message says what is wrong and what would be valid.
	Message string
}

// String formats p as "line 12: sites[1].name: message", leaving out the
// line or the path when unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is the error Parse returns for a rejected spec: every problem found,
// sorted by line. Use errors.As to get at the problems.
type Error struct {
	Problems []Problem
}

// Error prints one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// maxProblems bounds the problems one Parse reports, so that a pathological
// document cannot make Parse produce an unbounded error.
const maxProblems = 500

// problems collects Problems, at most maxProblems of them.
type problems struct {
	list []Problem
	// bad holds the paths whose YAML could not be decoded; problems about
	// them or anything under them are dropped, so that one mistake yields one
	// message rather than a cascade.
	bad  map[string]bool
	full bool
}

// markBad records that path could not be decoded.
func (ps *problems) markBad(path string) { ps.bad[path] = true }

// isBad reports whether path or one of its ancestors could not be decoded.
func (ps *problems) isBad(path string) bool {
	for {
		if ps.bad[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parentPath(path)
	}
}

// add records a problem, unless path or one of its ancestors could not be
// decoded (that problem is already reported). It reports whether more
// problems can be recorded, so that loops over many pairs can stop early.
func (ps *problems) add(line int, path, format string, args ...any) bool {
	if ps.full {
		return false
	}
	if path != "" && ps.isBad(path) {
		return true
	}
	if len(ps.list) == maxProblems {
		ps.full = true
		return false
	}
	ps.list = append(ps.list, Problem{Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
	return true
}

// err returns the collected problems as an *Error, or nil. Problems are
// sorted by line; problems on one line keep the order they were found in.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), ps.list...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].Line < list[j].Line })
	if ps.full {
		list = append(list, Problem{Message: fmt.Sprintf("too many problems; stopped after %d; fix these and run again", maxProblems)})
	}
	return &Error{Problems: list}
}
