-- Budgets of a run, stored with it so that no restart resets them, and what each step
-- charges against them: a step's cost is reserved with its intent and settled with its
-- outcome; a definite refusal is not counted; a step in doubt stays counted.
ALTER TABLE runs ADD COLUMN budget TEXT;                          -- JSON limits, or NULL
ALTER TABLE steps ADD COLUMN cost DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN irreversible INTEGER NOT NULL DEFAULT 0; -- 0 or 1, summed
