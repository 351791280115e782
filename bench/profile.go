package bench

import (
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// StartCPUProfile writes a CPU profile of this process to path until the
// returned function is called. A %p in path is the process id, so the
// processes of one bench run (MEERKATD_CPUPROFILE) write separate files.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.OpenFile(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
