package lakehouse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.math.BigInteger;

import org.junit.jupiter.api.Test;

class UnscaledDigitsTest {
    private final UnscaledDigits digits = new UnscaledDigits();

    @Test
    void bigEndianTwosComplementIsReadWithItsSign() {
        assertEquals("12345", digits.call(new byte[] {0x30, 0x39}));
        assertEquals("-1", digits.call(new byte[] {(byte) 0xff}));
        assertEquals("-129", digits.call(new byte[] {(byte) 0xff, 0x7f}));
        assertEquals("128", digits.call(new byte[] {0x00, (byte) 0x80}));
    }

    @Test
    void thirtyEightDigitsAreKeptAndThirtyNineAreNot() {
        BigInteger largest = BigInteger.TEN.pow(38).subtract(BigInteger.ONE);
        assertEquals(largest.toString(), digits.call(largest.toByteArray()));
        assertEquals(largest.negate().toString(), digits.call(largest.negate().toByteArray()));
        assertNull(digits.call(BigInteger.TEN.pow(38).toByteArray()));
        assertNull(digits.call(BigInteger.TEN.pow(38).negate().toByteArray()));
    }

    @Test
    void noBytesOrMoreThanSixteenAreNull() {
        assertNull(digits.call(null));
        assertNull(digits.call(new byte[0]));
        assertNull(digits.call(new byte[17]));
    }
}
