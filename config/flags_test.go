package config

import (
	"flag"
	"io"
	"reflect"
	"testing"
)

func TestFlagOverrides(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		values map[string]string
		flags  map[string]string
		err    bool
	}{
		{nil, map[string]string{}, map[string]string{}, false},
		{[]string{"--listen-tcp", "127.0.0.1:4300", "--log-format", "json"},
			map[string]string{"comms.listen_tcp": "127.0.0.1:4300", "log.format": "json"},
			map[string]string{"comms.listen_tcp": "--listen-tcp", "log.format": "--log-format"}, false},
		{[]string{"--listen-uds", "off", "--log-level", "debug"},
			map[string]string{"comms.listen_uds": "off", "log.level": "debug"},
			map[string]string{"comms.listen_uds": "--listen-uds", "log.level": "--log-level"}, false},
		{[]string{"--log-level", "verbose"}, nil, nil, true},
		{[]string{"--log-format", "xml"}, nil, nil, true},
		{[]string{"--other", "x"}, map[string]string{}, map[string]string{}, false}, // not a setting
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ListenFlags(fs)
		LogFlags(fs)
		fs.String("other", "", "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		values, flags, err := FlagOverrides(fs)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error", tc.args)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(values, tc.values) || !reflect.DeepEqual(flags, tc.flags) {
			t.Errorf("%q: %v %v %v; want %v %v", tc.args, values, flags, err, tc.values, tc.flags)
		}
	}
}
