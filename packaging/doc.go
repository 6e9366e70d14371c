// Package packaging holds the files of the .deb and .rpm packages that
// `make package` builds with nFPM (nfpm.yaml, the systemd units, the
// example settings, the maintainer scripts) and the test that builds the
// packages and checks what they install. It has no Go code of its own.
package packaging
