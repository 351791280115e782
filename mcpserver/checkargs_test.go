package mcpserver

// checkArgs validates the arguments of a call to tool name the way its
// handler does, without running it: the tests' way to check each tool's
// argument rules.
func checkArgs(name string, m map[string]any) error {
	a := args{m}
	var err error
	switch name {
	case "send_message":
		_, _, _, err = parseSendMessage(a)
	case "send_request":
		_, _, _, err = parseSendRequest(a)
	case "send_response":
		_, _, _, _, err = parseSendResponse(a)
	case "retry_dead_letters":
		_, _, err = parseRetry(a)
	case "retry_outbox":
		_, err = a.optStr("peer", "every peer")
	case "drop_queued":
		_, err = parseDropQueued(a)
	case "pair_accept":
		_, _, err = parsePairAccept(a)
	case "receive_messages":
		_, err = parseReceive(a)
	case "ack_messages":
		_, err = parseAck(a)
	case "message_status": // slice B
		_, err = parseMessageStatus(a)
	// Slice C: search.
	case "search_messages":
		_, err = parseSearch(a)
	default:
		var handled bool
		if handled, err = checkBroadcastArgs(name, a); handled {
			break
		}
		if handled, err = checkCardArgs(name, a); handled {
			break
		}
		if handled, err = checkLifecycleArgs(name, a); handled {
			break
		}
		_, err = checkSpaceArgs(name, a)
	}
	return err
}

// checkBroadcastArgs validates the arguments of the broadcast and task
// tools; handled is false for other tools.
func checkBroadcastArgs(name string, a args) (handled bool, err error) {
	switch name {
	case "broadcast":
		_, err = parseBroadcast(a)
	case "task_complete":
		_, _, err = parseTaskComplete(a)
	case "list_tasks":
		_, err = parseTaskQuery(a)
	case "wait_task":
		_, _, err = parseWaitTask(a)
	default:
		return false, nil
	}
	return true, err
}

// checkCardArgs validates the arguments of the card tools; ok false: name
// is not one of them.
func checkCardArgs(name string, a args) (ok bool, err error) {
	if name != "describe_peer" {
		return false, nil
	}
	_, _, err = parseDescribePeer(a)
	return true, err
}

// checkLifecycleArgs checks the lifecycle tools' arguments; ok is false
// for other tools.
func checkLifecycleArgs(name string, a args) (ok bool, err error) {
	switch name {
	case "cancel_request":
		_, _, _, err = parseCancelRequest(a)
	case "list_requests":
		_, err = parseRequestQuery(a)
	default:
		return false, nil
	}
	return true, err
}

// checkSpaceArgs validates a space tool call's arguments (for checkArgs).
func checkSpaceArgs(name string, a args) (bool, error) {
	if name == "edit_space" {
		_, err := parseEditSpace(a, decodedRaw(a))
		return true, err
	}
	if name == "list_proposals" {
		_, err := parseProposalQuery(a)
		return true, err
	}
	for _, st := range spaceTools {
		if st.name == name {
			_, err := parseSpaceMessage(st, a, decodedRaw(a))
			return true, err
		}
	}
	return false, nil
}
