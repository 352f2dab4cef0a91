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
    // Failed looks wait longer and longer (lumino's back-off), past the plain 20 ms within a few
    // looks. Its waits are drawn at random between the base and three times the last one, and
    // the first after the poll's immediate start can be under 20 ms (19 failed once in CI): so
    // wait for the growth, not for the third look's wait alone.
    await until(() => model.interval > 20);
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
