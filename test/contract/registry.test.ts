import { inviteKey, MemoryRegistryStore, RedisRegistryStore } from "@switchyard/state";
import { registryContract, type ContractRegistry } from "./registry.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins<ContractRegistry>(registryContract, {
  // Invites are written by the admin (registry/invites.ts inviteWorker); here the same key directly.
  redis: (r) =>
    Object.assign(new RedisRegistryStore(r.redis, r.prefix), {
      putInvite: async (workerId: string, grant: { models: string[]; createdAt: number }) => void (await r.redis.set(inviteKey(r.prefix, workerId), JSON.stringify(grant))),
    }),
  memory: (clock) => new MemoryRegistryStore(clock),
});
