package org.interop.harness;

import java.nio.charset.StandardCharsets;

/**
 * Pulsar's Key_Shared sticky hash, written here independently of the broker and the client:
 * MurmurHash3 x86_32 (seed 0) of the key's UTF-8 bytes, {@code & Integer.MAX_VALUE}, then
 * {@code % 65536}.
 */
public final class StickyHash {
    public static final int RANGE = 65536;

    private StickyHash() {}

    public static int murmur3_32(byte[] data, int seed) {
        final int c1 = 0xcc9e2d51;
        final int c2 = 0x1b873593;
        int h = seed;
        int n = data.length;
        int blocks = n / 4;
        for (int b = 0; b < blocks; b++) {
            int i = b * 4;
            int k = (data[i] & 0xff) | (data[i + 1] & 0xff) << 8 | (data[i + 2] & 0xff) << 16 | (data[i + 3] & 0xff) << 24;
            k *= c1;
            k = Integer.rotateLeft(k, 15);
            k *= c2;
            h ^= k;
            h = Integer.rotateLeft(h, 13);
            h = h * 5 + 0xe6546b64;
        }
        int tail = blocks * 4;
        int k = 0;
        switch (n - tail) {
            case 3:
                k ^= (data[tail + 2] & 0xff) << 16;
                // fall through
            case 2:
                k ^= (data[tail + 1] & 0xff) << 8;
                // fall through
            case 1:
                k ^= data[tail] & 0xff;
                k *= c1;
                k = Integer.rotateLeft(k, 15);
                k *= c2;
                h ^= k;
                break;
            default:
                break;
        }
        h ^= n;
        h ^= h >>> 16;
        h *= 0x85ebca6b;
        h ^= h >>> 13;
        h *= 0xc2b2ae35;
        h ^= h >>> 16;
        return h;
    }

    /** The slot in [0, 65535] that Pulsar's STICKY ranges are matched against. */
    public static int slot(String key) {
        return (murmur3_32(key.getBytes(StandardCharsets.UTF_8), 0) & Integer.MAX_VALUE) % RANGE;
    }
}
