import { inviteKey, MemoryRegistryStore, RedisRegistryStore, scanKeys } from "@switchyard/state";
import { registryContract, type ContractRegistry } from "./registry.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins<ContractRegistry>(registryContract, {
  // Invites are written by the admin (registry/invites.ts inviteWorker); here the same key directly.
  redis: (r) =>
    Object.assign(new RedisRegistryStore(r.redis, r.prefix), {
      putInvite: async (workerId: string, grant: { models: string[]; createdAt: number }) => void (await r.redis.set(inviteKey(r.prefix, workerId), JSON.stringify(grant))),
      // What a restart without persistence leaves of the prefix: nothing (one DEL per key: a Cluster's keys span slots).
      lose: async () => {
        for (const k of await scanKeys(r.redis, `${r.prefix}*`)) await r.redis.del(k);
      },
    }),
  memory: (clock) => Object.assign(new MemoryRegistryStore(clock), { lose: function (this: MemoryRegistryStore) { return this.clear(); } }),
});
