import { MemoryRegistryStore, RedisRegistryStore } from "@switchyard/state";
import { registryContract } from "./registry.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(registryContract, {
  redis: (r) => new RedisRegistryStore(r.redis, r.prefix),
  memory: (clock) => new MemoryRegistryStore(clock),
});
