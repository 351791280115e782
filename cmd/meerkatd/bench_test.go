package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/trust"
)

// BenchmarkPipelinedDelivery measures acknowledged messages per second
// from one node to another over one pipelined UDS link, with the receiver
// keeping its inbox in memory and in SQLite, in the same run: the ratio is
// issue 5's "durable ≥ 75% of memory" figure for this machine.
func BenchmarkPipelinedDelivery(b *testing.B) {
	for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
		b.Run(mode, func(b *testing.B) {
			dir, err := os.MkdirTemp("", "mkb")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			e := newEnv(io.Discard, io.Discard, mapEnv(map[string]string{"MEERKAT_STORE_MODE": mode, "MEERKAT_COMMS_INBOX_MAX": "1000000", "MEERKAT_COMMS_INBOX_MAX_BYTES": "1000000000"}))
			homes := map[string]*home{}
			for _, name := range []string{"alice", "bob"} {
				d := filepath.Join(dir, name)
				if _, err := initHome(d, name); err != nil {
					b.Fatal(err)
				}
				if homes[name], err = e.openHome(d, nil); err != nil {
					b.Fatal(err)
				}
			}
			trustEach := func(self, other string) {
				h := homes[other]
				ls, _ := h.cfg.Resolve(h.dir)
				l, err := trust.New(trust.Peer{Name: other, ID: h.kp.ID(), Addr: ls.UDS})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Save(filepath.Join(homes[self].dir, trust.FileName)); err != nil {
					b.Fatal(err)
				}
			}
			trustEach("alice", "bob")
			trustEach("bob", "alice")
			log := slog.New(slog.DiscardHandler)
			bob, err := startNode(homes["bob"], log, nodeFull)
			if err != nil {
				b.Fatal(err)
			}
			defer bob.stop()
			alice, err := startNode(homes["alice"], log, nodeSendOnly)
			if err != nil {
				b.Fatal(err)
			}
			defer alice.stop()
			const inFlight = 128
			ctx := context.Background()
			sem := make(chan struct{}, inFlight)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstErr error
			start := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					if _, err := alice.r.SendMessage(ctx, "bob", fmt.Sprintf("message %d", i)); err != nil {
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
