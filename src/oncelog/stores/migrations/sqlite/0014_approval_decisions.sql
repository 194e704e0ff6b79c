-- The decisions that approve a request, found by an intent through this index instead of
-- a pass over its run's whole journal, so an intent that uses an approval costs the same
-- however long its run is. Partial: no other record pays for it.
CREATE INDEX journal_approvals ON journal (run_id, event, id) WHERE event = 'approval_approved';
