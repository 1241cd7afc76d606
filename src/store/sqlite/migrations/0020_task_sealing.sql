-- What a working task's call states of itself in its receipt (JSON, docs/receipts.md), kept
-- with the working state so that a task failed without its turn (a crash, an instance gone)
-- is sealed like any other; NULL once the task is finished, or when it gets no receipt.
ALTER TABLE tasks ADD COLUMN sealing TEXT;
