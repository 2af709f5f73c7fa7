/** The real kernel as an NftHost: NftSocket connections and Monitor watches in one network namespace. */
import type { NftHost } from './conn.js';
import { Monitor } from './monitor.js';
import { NftSocket } from './socket.js';

/** The kernel of a network namespace (a namespace file path), or of this process's. */
export function kernelHost(netns?: string): NftHost {
  return {
    connect: () => new NftSocket({ netns }),
    watch: (options) => new Monitor({ ...options, netns }),
  };
}
