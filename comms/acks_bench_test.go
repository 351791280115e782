package comms

import (
	"context"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// BenchmarkAcksKinds measures pipelined delivery between two Routers in
// this process, 128 in flight, with acks kinds and with one ack per
// envelope (Options.SingleAcks), in the same run: acks/single of msgs/s
// is what acks kinds and the batches they come with buy on this machine.
func BenchmarkAcksKinds(b *testing.B) {
	for _, network := range []string{"uds", "tcp"} {
		for _, single := range []bool{false, true} {
			name := network + "/acks"
			if single {
				name = network + "/single"
			}
			b.Run(name, func(b *testing.B) {
				a, _ := pair(b, network, Options{SingleAcks: single, InboxMax: b.N + 1})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				elapsed := testutil.RunInFlight(b, 128, func(int) error {
					_, err := a.r.SendMessage(ctx, "bob", "pipelined")
					return err
				})
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			})
		}
	}
}
