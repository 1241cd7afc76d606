-- What an administrator may do on the admin API: 'admin' (read and change their own peers) or
-- 'auditor' (read peers, usage, audit and conversations; change nothing).
ALTER TABLE admins ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
