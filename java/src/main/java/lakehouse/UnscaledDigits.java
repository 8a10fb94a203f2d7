package lakehouse;

import java.math.BigInteger;

import org.apache.spark.sql.api.java.UDF1;

/**
 * The integer held by big-endian two's-complement bytes (Kafka Connect's Decimal: the unscaled value), as decimal
 * digits with its sign: null for no bytes, more than 16 (no decimal(38) holds them), or a value of 39 digits.
 */
public final class UnscaledDigits implements UDF1<byte[], String> {
    private static final BigInteger LIMIT = BigInteger.TEN.pow(38);

    @Override
    public String call(byte[] bytes) {
        if (bytes == null || bytes.length == 0 || bytes.length > 16) {
            return null;
        }
        BigInteger value = new BigInteger(bytes);
        return value.abs().compareTo(LIMIT) >= 0 ? null : value.toString();
    }
}
