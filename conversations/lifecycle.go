package conversations

// ErasedContent replaces the text of a message whose author's data was erased, in the
// conversations of others: the message stays, so the thread and the answers to it keep
// their shape, but the author's words, which are their personal data, go.
const ErasedContent = "(This message was removed: its author's data was erased.)"

// Erased is what erasing one author's writings in the conversations of others did.
type Erased struct {
	// Messages had their text replaced by ErasedContent and lost their author.
	Messages int64 `json:"messages_anonymized"`
	// Uploads they made to conversations of others were deleted.
	Uploads int64 `json:"uploads_deleted"`
	// Conversations lost their replay history (their events), which carried the text.
	Conversations int64 `json:"conversations_touched"`
	// Titles made from their first message were cleared.
	Titles int64 `json:"titles_cleared"`
}

// TurnRef names a turn.
type TurnRef struct {
	ConversationID int64
	TurnID         int64
}

// Idle is a conversation retention may delete, with its owner, on whose behalf it is
// deleted.
type Idle struct {
	ID      int64
	OwnerID int64
}
