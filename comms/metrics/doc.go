// Package metrics serves a node's Prometheus metrics and health checks
// over HTTP: /metrics in the Prometheus text format, /healthz and /readyz.
//
// The figures are read from a [Source] when Prometheus scrapes, not
// counted twice: the node already keeps its counters and states. Only
// what happens between scrapes and must be summed as it happens (the ack
// round trip) is recorded here, in a histogram. No series carries a
// message's content; peers are labelled by their trust-list names, at
// most [MaxPeerLabels] of them, the rest summed under "_other".
//
// The series (prefix meerkatd_):
//
//	envelopes_received_total             envelopes admitted to the inbox
//	envelopes_duplicate_total            repeats acknowledged again but not delivered
//	acks_sent_total                      acks written to peers
//	envelopes_refused_total{reason}      envelopes refused without an ack, by reason
//	sends_total{outcome}                 delivery attempts by outcome (acked, written, failed, retry, dead_letter, expired)
//	ack_round_trip_seconds               histogram: from an attempt's start to the peer's ack
//	inbox_items                          unacknowledged items in the inbox
//	inbox_bytes                          their size in bytes
//	outbox_queued{peer}                  reliable sends waiting, per peer
//	outbox_breaker{peer,state}           1 for a peer's circuit breaker state (closed, open, half_open); "_other" counts peers
//	dead_letters                         reliable sends given up on, kept
//	inbound_connections{state}           inbound connections open now, authenticated or not
//	db_bytes                             the database's size on disk (with its write-ahead log)
package metrics
