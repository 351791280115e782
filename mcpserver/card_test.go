package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

func (f *fakeNode) Card(context.Context) (node.OwnCard, error) {
	return node.OwnCard{}, &node.Error{Code: node.CodeInternal, Msg: "not in the fake"}
}

func (f *fakeNode) CardEdit(context.Context, node.CardEdit) (node.OwnCard, error) {
	return node.OwnCard{}, &node.Error{Code: node.CodeInternal, Msg: "not in the fake"}
}

func (f *fakeNode) FetchCard(context.Context, string) (node.PeerCard, error) {
	return node.PeerCard{}, &node.Error{Code: node.CodeInternal, Msg: "not in the fake"}
}

// DescribePeer: bob has a card, ghost's is refused, others are unknown.
func (f *fakeNode) DescribePeer(ctx context.Context, peer string, refresh bool) (node.PeerDescription, error) {
	switch peer {
	case "bob":
		peers, _ := f.Peers(ctx)
		at := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
		desc := "reviews"
		if refresh {
			desc = "reviews, refreshed"
		}
		return node.PeerDescription{Peer: peers[0], Card: node.PeerCard{
			CardInfo: node.CardInfo{Name: "bob", Description: desc, Intents: []node.CardIntentInfo{
				{Name: "review-pr", ParamsSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"}}}`)},
				{Name: "ping"},
			}, PubKey: peers[0].PubKey, Signature: "c2ln"},
			Peer: "bob", FetchedAt: at, Untrusted: true}}, nil
	case "ghost":
		return node.PeerDescription{}, &node.Error{Code: node.CodeBadCard, Msg: "the card ghost sent is refused: card: the signature does not verify"}
	}
	return node.PeerDescription{}, &node.Error{Code: node.CodeUnknownPeer, Msg: "no such peer"}
}

func TestDescribePeer(t *testing.T) { bothEras(t, testDescribePeer) }

func testDescribePeer(t *testing.T, era string) {
	c, _ := startClient(t, newFakeNode(), era)
	res, out, err := call(t, c, "describe_peer", map[string]any{"peer": "bob"})
	if err != nil || res.IsError {
		t.Fatalf("describe_peer: %v %v", err, text(res))
	}
	card, _ := out["card"].(map[string]any)
	intents, _ := card["intents"].([]any)
	if card["name"] != "bob" || card["untrusted"] != true || len(intents) != 2 || out["pending"] == nil {
		t.Fatalf("result: %v", out)
	}
	schema, _ := intents[0].(map[string]any)["params_schema"].(map[string]any)
	if schema["type"] != "object" {
		t.Fatalf("params_schema: %v", intents[0])
	}
	if p, _ := out["peer"].(map[string]any); p["name"] != "bob" {
		t.Fatalf("peer: %v", out["peer"])
	}
	_, out, _ = call(t, c, "describe_peer", map[string]any{"peer": "bob", "refresh": true})
	if card, _ := out["card"].(map[string]any); card["description"] != "reviews, refreshed" {
		t.Fatalf("refresh not passed: %v", out)
	}
	res, _, err = call(t, c, "describe_peer", map[string]any{"peer": "ghost"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "bad_card: ") || !strings.Contains(text(res), "pending") {
		t.Fatalf("refused card: %v %v", err, text(res))
	}
	if err := checkArgs("describe_peer", map[string]any{"peer": "bob", "refresh": "yes"}); err == nil {
		t.Fatal("refresh as text accepted")
	}
	if err := checkArgs("describe_peer", map[string]any{}); err == nil {
		t.Fatal("missing peer accepted")
	}
}
