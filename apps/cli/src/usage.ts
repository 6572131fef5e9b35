// Exit codes and the usage error shared by every command.
export class UsageError extends Error {
  override name = "UsageError";
}

export const usage = `switchyard — a distributed inference fabric

Usage:
  switchyard up                         router + local worker, embedded state (single machine)
  switchyard router [--config FILE]     start a router (Redis + Postgres from config/env)
  switchyard worker --redis URL --token SECRET [--model NAME|PATH|hf://…]… [--advertise URL]
           [--port 9100] [--device auto|cpu|cuda|metal] [--id ID]
                                        join this host as a worker (SIGTERM drains)
  switchyard workers invite NAME [--model M]… [--advertise URL]
                                        per-worker Redis ACL user + secret; prints the join command
  switchyard workers revoke NAME        remove an invited worker's Redis user
  switchyard spend [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--tenant NAME] [--by day|backend|model] [--format table|csv]
                                        spend from the ledger (defaults: today, table)
  switchyard migrate                    apply database migrations
  switchyard tenants create NAME        create a tenant
  switchyard tenants list               list tenants
  switchyard keys create --tenant NAME [--name LABEL]
                                        create an API key (printed once)
  switchyard keys list --tenant NAME    list a tenant's keys
  switchyard keys revoke PREFIX         revoke a key by its visible prefix (sy_xxxxxxxx)
  switchyard bench router [--quick] [--levels 1,100,1000]
                                        router overhead benchmark (prints a table)
  switchyard bench engine [--quick]     engine vs llama.cpp on the same GGUF (prints a table)

Configuration: switchyard.yaml (or --config / SWITCHYARD_CONFIG) plus SWITCHYARD_* env;
DATABASE_URL unset → embedded PostgreSQL under $SWITCHYARD_HOME (default ./.switchyard).`;
