package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// BenchmarkPipelinedDelivery measures acknowledged messages per second
// from one node to another over one pipelined link, over UDS, plaintext
// TCP and TLS on 127.0.0.1, with the receiver keeping its inbox in memory
// and in SQLite, in the same run: per transport, sqlite/memory is the
// "durable ≥ 75% of memory" figure for this machine, and tls/tcp the
// price of encryption.
func BenchmarkPipelinedDelivery(b *testing.B) {
	for _, network := range []string{"uds", "tcp", "tls"} {
		for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
			b.Run(network+"/"+mode, func(b *testing.B) {
				benchDelivery(b, network, mode, 128)
			})
		}
	}
}

// BenchmarkSequentialDelivery is BenchmarkPipelinedDelivery with one
// message in flight: ns/op is the round trip (send, admit, ack) between
// two nodes in one process, and its CPU profile shows the per-message
// work of both ends on the latency path.
func BenchmarkSequentialDelivery(b *testing.B) {
	for _, network := range []string{"uds", "tcp", "tls"} {
		b.Run(network, func(b *testing.B) {
			benchDelivery(b, network, config.StoreMemory, 1)
		})
	}
}

// benchDelivery runs b.N messages from alice to bob (deliveryPair), at
// most inFlight unacknowledged at a time.
func benchDelivery(b *testing.B, network, mode string, inFlight int) {
	alice := deliveryPair(b, network, mode)
	ctx := context.Background()
	elapsed, cpu := runInFlight(b, inFlight, func(i int) error {
		_, err := alice.r.SendMessage(ctx, "bob", fmt.Sprintf("message %d", i))
		return err
	})
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	// CPU per message (both nodes, this process) is steadier than msgs/s
	// when other work shares the machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
}

// runInFlight is testutil.RunInFlight, also returning the process CPU
// time the operations took.
func runInFlight(b *testing.B, inFlight int, op func(i int) error) (elapsed, cpu time.Duration) {
	cpu0 := processCPU()
	elapsed = testutil.RunInFlight(b, inFlight, op)
	return elapsed, processCPU() - cpu0
}

// processCPU returns the user and system CPU time the process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// deliveryPair starts two nodes in this process, alice (send only) and
// bob (a full node keeping its inbox per mode), each trusting the other,
// and returns alice, who sends to "bob"; the test's cleanup stops both.
// Over network "tcp" or "tls" bob listens only on a TCP port of
// 127.0.0.1 and alice's trust entry names the port bob actually listens
// on (as tls://, with both refusing plaintext, for "tls").
func deliveryPair(tb testing.TB, network, mode string) *Node {
	dir, err := os.MkdirTemp("", "mkb") // short: socket paths have a length limit
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	vars := map[string]string{"MEERKAT_STORE_MODE": mode, "MEERKAT_COMMS_INBOX_MAX": "1000000", "MEERKAT_COMMS_INBOX_MAX_BYTES": "1000000000"}
	if network != "uds" {
		vars["MEERKAT_COMMS_LISTEN_UDS"] = config.UDSOff
		vars["MEERKAT_COMMS_LISTEN_TCP"] = "127.0.0.1:" + strconv.Itoa(freeTCPPort(tb))
	}
	if network == "tls" {
		vars["MEERKAT_COMMS_TCP_PLAINTEXT"] = config.Refuse
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	homes := map[string]*Home{}
	for _, name := range []string{"alice", "bob"} {
		d := filepath.Join(dir, name)
		if _, err := InitHome(d, name); err != nil {
			tb.Fatal(err)
		}
		if homes[name], _, err = OpenHome(d, OpenOptions{LookupEnv: lookup}); err != nil {
			tb.Fatal(err)
		}
	}
	saveTrust := func(self, other string, addr transport.Addr) {
		l, err := trust.New(trust.Peer{Name: other, ID: homes[other].Key.ID(), Addr: addr})
		if err != nil {
			tb.Fatal(err)
		}
		if err := l.Save(filepath.Join(homes[self].Dir, trust.FileName)); err != nil {
			tb.Fatal(err)
		}
	}
	// alice only sends (and gets acks back on the same connection), so
	// bob never dials the address he has for her.
	saveTrust("bob", "alice", transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(homes["alice"].Dir, config.DefaultSocketName)})
	bob, err := Start(homes["bob"], Options{Mode: ModeServe})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { bob.Close() })
	if len(bob.addrs) != 1 {
		tb.Fatalf("bob listens on %v, want one address", bob.addrs)
	}
	saveTrust("alice", "bob", bob.addrs[0].WithScheme(network))
	alice, err := Start(homes["alice"], Options{Mode: ModeSend})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { alice.Close() })
	return alice
}

// freeTCPPort returns a port on 127.0.0.1 that was free a moment ago.
func freeTCPPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// BenchmarkSpaceBroadcast measures a MEUP space's fan-out in one process:
// a node sends chat to a space of three (one signed copy to each of the
// two other members, direct, every copy acknowledged), against the same
// node sending a plain message to each of the same two peers, in the
// same run. Both cost two signed, acknowledged envelopes per operation;
// the difference in cpu-µs/copy is the space path's own work (building,
// parsing and checking the MEUP envelope, the engine's state).
func BenchmarkSpaceBroadcast(b *testing.B) {
	ctx := context.Background()
	// Each run starts its own three nodes: links left idle between runs
	// would be closed by the receivers' idle timeout.
	start := func(b *testing.B) *Node {
		nodes := spaceNodes(b, map[string]string{"a": `[{"kind":"*"}]`, "b": `[{"kind":"*"}]`, "c": `[{"kind":"*"}]`}, "a", "b", "c")
		return nodes["a"]
	}
	run := func(b *testing.B, op func(i int) error) {
		elapsed, cpu := runInFlight(b, 32, op)
		b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "copies/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(2*b.N), "cpu-µs/copy")
	}
	b.Run("space", func(b *testing.B) {
		a := start(b)
		run(b, func(i int) error {
			s, err := a.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActChat, Text: fmt.Sprintf("chat %d", i)})
			if err == nil && (len(s.Copies) != 2 || s.Copies[0].Delivery != DeliveryAcked || s.Copies[1].Delivery != DeliveryAcked) {
				err = fmt.Errorf("copies %+v", s.Copies)
			}
			return err
		})
	})
	b.Run("messages", func(b *testing.B) {
		a := start(b)
		run(b, func(i int) error {
			for _, peer := range []string{"b", "c"} {
				if _, err := a.SendMessage(ctx, peer, fmt.Sprintf("message %d", i), SendOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
