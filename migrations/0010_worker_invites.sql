CREATE TABLE "worker_invites" (
	"key_prefix" text NOT NULL,
	"worker_id" text NOT NULL,
	"models" text[] NOT NULL,
	"password_sha256" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "worker_invites_key_prefix_worker_id_pk" PRIMARY KEY("key_prefix","worker_id")
);
