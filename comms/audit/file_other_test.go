//go:build !unix

package audit

import "testing"

func addSpecialFiles(t *testing.T, dir string, paths map[string]string) {}
