package mcpserver

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// receiveOrderDoc explains a priority read to a model.
const receiveOrderDoc = "Every item has a class: system (a notice from your own node: a reliable send became a dead letter, a peer's breaker opened, a pairing completed, the loop guard began holding sends to a peer, a request you sent passed its deadline, a peer cancelled a request you hold), " +
	"user (a note your person added with meerkatd tell), interrupt (a peer asked to be handled at your next boundary), broadcast, or normal. " +
	"By default items come by class in that order, then oldest first; system and user items are your own node's and your person's (untrusted false), handle them first. " +
	"order \"arrival\" lists oldest first, classes aside. pending_by_class counts what is pending in each class. " +
	"In priority order the cursor stays below the oldest item left out, so passing it as after never skips one: items you already saw may come again until you acknowledge them."

// interruptDoc describes the send tools' interrupt argument.
const interruptDoc = "true: mark it handling_mode \"steer\", an interrupt: the peer's agent sees it before its queued messages and should handle it at its next boundary. Use it only for what cannot wait."

// orderArg is receive_messages' order argument.
var orderArg = mcp.WithString("order", mcp.Enum(node.OrderPriority, node.OrderArrival),
	mcp.Description("priority (default): by class (system, user, interrupt, broadcast, normal), then oldest first; arrival: oldest first"))

// parseOrder reads receive_messages' order.
func parseOrder(a args) (string, error) {
	o, err := a.str("order", false)
	if err != nil {
		return "", err
	}
	if o != "" && o != node.OrderPriority && o != node.OrderArrival {
		return "", invalidParams{`argument "order" must be "priority" or "arrival"`}
	}
	return o, nil
}

// parseInterrupt reads the send tools' interrupt.
func parseInterrupt(a args) (bool, error) {
	v, ok := a.m["interrupt"]
	if !ok || v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, invalidParams{`argument "interrupt" must be a boolean`}
	}
	return b, nil
}
