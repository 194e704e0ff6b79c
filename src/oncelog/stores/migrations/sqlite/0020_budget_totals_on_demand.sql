-- The budget totals' triggers (0009, 0017) are kept only in a ledger that has had a
-- budget: where no run and no agent has one they count nothing, yet each write of a step
-- paid for entering them (about 36 k instructions per effect). Dropped here; in this same
-- transaction the store creates them again if the ledger holds a budget, and otherwise
-- in the transaction that first sets one, which counts the totals afresh
-- (stores/_sqlite_totals.py holds their text). Re-runnable: IF EXISTS.
DROP TRIGGER IF EXISTS steps_count_new;
DROP TRIGGER IF EXISTS steps_count_change;
