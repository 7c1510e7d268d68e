-- name: GetAuthor :one
SELECT id, name, bio, inet_server_port()::int AS port FROM authors WHERE id = $1;

-- name: ListAuthors :many
SELECT id, name, bio FROM authors ORDER BY id;

-- name: CountAuthors :one
SELECT count(*) FROM authors;

-- name: CreateAuthor :one
INSERT INTO authors (name, bio) VALUES ($1, $2) RETURNING id, inet_server_port()::int AS port;

-- name: UpdateAuthorBio :exec
UPDATE authors SET bio = $2 WHERE id = $1;

-- name: DeleteAuthor :execrows
DELETE FROM authors WHERE id = $1;

-- name: CopyAuthors :copyfrom
INSERT INTO authors (name, bio) VALUES ($1, $2);

-- name: UpdateBios :batchexec
UPDATE authors SET bio = $2 WHERE id = $1;

-- name: GetAuthors :batchone
SELECT id, name, bio, inet_server_port()::int AS port FROM authors WHERE id = $1;
