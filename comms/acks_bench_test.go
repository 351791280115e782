package comms

import (
	"context"
	"sync"
	"testing"
	"time"
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
				sem := make(chan struct{}, 128)
				var wg sync.WaitGroup
				var mu sync.Mutex
				var firstErr error
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						if _, err := a.r.SendMessage(ctx, "bob", "pipelined"); err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}
