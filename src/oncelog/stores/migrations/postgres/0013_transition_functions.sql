-- An intent and an outcome, each in one round trip (_postgres_transitions): one call,
-- in autocommit, so the call is its own transaction. Each does what the transaction of
-- _sql_store does, with the same locks in the same order (_sql_tx): the kill switch
-- (shared, intents only), the run's row (the fencing check, the lease extended once half
-- used), the step's row, then the run's journal (its head read after the lock, so it is
-- the head the previous holder committed; a VOLATILE function takes a snapshot per
-- statement). The journal hash is _chain.link: the client sends the canonical record up to
-- its data ("chain head"); the data and the time are only known here.
--
-- The functions do the common case only: a new step's intent, an outcome. A restarted
-- step, an approval or a run budget never comes here (the client knows); whatever else
-- needs the store's Python logic (a halt that is on, an agent with a daily budget, a time
-- whose text is not Python's) raises
-- SQLSTATE OL000, which rolls the call back whole, and the client runs the transaction of
-- _sql_store instead, which raises what it always raised. OL001: fenced out (another
-- owner or token); OL003: an outcome whose attempt is no longer in flight; a unique
-- violation: a step id already recorded at another position. Every CREATE is OR REPLACE: a later migration may
-- redefine them.

-- A time as Python's json.dumps writes it (_chain.canonical), or OL000. With
-- extra_float_digits > 0 (set on the callers) PostgreSQL writes the shortest text that
-- reads back exactly, as Python's repr does; Python adds ".0" to a whole number and uses
-- exponents in other ranges than PostgreSQL, so those are left to the client.
-- (oncelog_time_text: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- The fencing check of _sql_tx.fence: the run's row locked until the commit, OL001 for a
-- stale owner, the lease extended once half of it is used.
-- (oncelog_fence: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- _sql_tx.append; ``p_at`` NULL: now. The canonical record is the client's head, then
-- the data as a JSON string (to_json escapes as Python's json.dumps does: the same
-- characters, the same lowercase \u00XX), then the time.
-- (oncelog_append: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1.
-- (oncelog_intent: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- SQLStore.write_outcome's transaction (_end_step, not probed). Given the intent's call
-- as its attempt, the two make SQLStore.record_step's transaction in one statement. The
-- step is named by both its keys: on a table whose statistics are stale (a new ledger)
-- the planner may take either unique index for the generic plan, and with only the run
-- in the other's condition it scans every step of the run.
-- (oncelog_outcome: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)
