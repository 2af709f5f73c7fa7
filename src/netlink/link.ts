/**
 * The network interfaces of a namespace, read over rtnetlink (RTM_GETLINK):
 * `iif`/`oif` rules name an interface, the kernel matches its index, and
 * only the namespace the rules go into can say which index a name has.
 */
import { NetlinkError, errnoName } from '../base/errors.js';
import { loadAddon } from './addon.js';

export interface Link {
  index: number;
  name: string;
}

/** The interfaces of the namespace at `netns` (a /run/netns path), or of this process's. */
export function listLinks(netns?: string): Link[] {
  const r = loadAddon().links(netns);
  if (typeof r === 'number') {
    throw new NetlinkError(`list network interfaces${netns ? ` in ${netns}` : ''}: ${errnoName(r)}`, r, 'list links');
  }
  return r;
}
