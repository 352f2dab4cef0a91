// The shape every panel model shares: a failed look is kept as the model's error and makes the
// poll back off; the first look that succeeds clears both.
import { PolledModel, sleep } from '../polled';

class Probe extends PolledModel {
  down = true;
  looks = 0;

  protected async load(): Promise<void> {
    this.looks++;
    if (this.down) {
      throw new Error('Service Unavailable');
    }
  }

  get phase(): string {
    return this.poll.state.phase;
  }

  get interval(): number {
    return this.poll.state.interval;
  }
}

async function until(done: () => boolean): Promise<void> {
  for (let k = 0; k < 200 && !done(); k++) {
    await sleep(10);
  }
}

let model: Probe;

beforeEach(() => {
  model = new Probe(20, 5000);
});

afterEach(() => {
  model.dispose();
});

describe('PolledModel', () => {
  it('backs off while the server cannot answer, and comes back once it does', async () => {
    await until(() => model.looks >= 3);
    expect(model.error).toBe('Service Unavailable');
    expect(model.phase).toBe('rejected');
    // Each failed look waits longer than the one before (lumino's back-off), never the plain 20 ms.
    expect(model.interval).toBeGreaterThan(20);

    model.down = false;
    const looks = model.looks;
    await until(() => model.looks > looks && model.error === null);
    await until(() => model.phase === 'resolved');
    expect(model.error).toBeNull();
    expect(model.phase).toBe('resolved');
  });

  it('a refresh the panel asks for never throws, even when the look fails', async () => {
    await expect(model.refresh()).resolves.toBeUndefined();
    expect(model.error).toBe('Service Unavailable');
  });
});
