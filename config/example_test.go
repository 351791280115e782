package config_test

import (
	"fmt"

	"github.com/meerkatd/meerkatd/config"
)

func Example() {
	// meerkat.toml, then the environment, as cmd/meerkatd composes them.
	cfg, err := config.Parse([]byte(`
name = "alice"

[comms]
listen_uds = "/tmp/meerkat-{name}.sock"
listen_tcp = "127.0.0.1:4200"
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	env := map[string]string{"MEERKAT_COMMS_ACK_TIMEOUT": "5"}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		fmt.Println(err)
		return
	}
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	listeners, err := cfg.Resolve("/home/alice/.config/meerkat")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range listeners.All() {
		fmt.Println(a)
	}
	fmt.Println(cfg.Comms.AckTimeout())
	// Output:
	// uds:///tmp/meerkat-alice.sock
	// tcp://127.0.0.1:4200
	// 5s
}

func ExampleConfig_Validate() {
	cfg := config.Default()
	cfg.Comms.AckTimeoutSecs = 0
	cfg.Comms.ListenTCP = ":4200"
	fmt.Println(cfg.Validate())
	// Output:
	// config: comms.listen_tcp: ":4200" has no host; use 0.0.0.0:4200 or [::]:4200 to listen on all interfaces
	// config: comms.ack_timeout_secs: must be between 1 and 604800, got 0
}

func ExampleParse_unknownKey() {
	_, err := config.Parse([]byte("[comms]\nlisten_udp = \"/tmp/a.sock\"\n"))
	fmt.Println(err)
	// Output:
	// config: comms.listen_udp: unknown key (did you mean "comms.listen_uds"?)
}
