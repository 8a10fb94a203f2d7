package lakehouse.catalog;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.util.Base64;

import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * Who sends a request: its bearer token is a JWT signed (RS256) with the server's own key pair (the platform mints
 * them, `lakehouse catalog token`). A token counts only when its signature verifies with the public key, it was
 * issued by the expected issuer and it has not expired; its principal is the `upn` claim (else `sub`). No identity
 * provider runs: the public key alone decides.
 */
public final class BearerTokens {

  /** A request whose token does not count: the server answers 401 with this message. */
  public static final class Refused extends Exception {
    public Refused(String message) {
      super(message);
    }
  }

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Base64.Decoder URL = Base64.getUrlDecoder();

  private final PublicKey key;
  private final String issuer;

  public BearerTokens(PublicKey key, String issuer) {
    this.key = key;
    this.issuer = issuer;
  }

  /** An RSA public key from its PEM text (`-----BEGIN PUBLIC KEY-----`, as openssl writes it). */
  public static PublicKey publicKey(String pem) throws GeneralSecurityException {
    String body = pem.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
    return KeyFactory.getInstance("RSA").generatePublic(new X509EncodedKeySpec(Base64.getDecoder().decode(body)));
  }

  /** The principal of an `Authorization` header's value, or Refused saying why not. */
  public String principal(String authorization, long nowSeconds) throws Refused {
    if (authorization == null || !authorization.regionMatches(true, 0, "Bearer ", 0, 7)) {
      throw new Refused("a bearer token is required (Authorization: Bearer <token>; `lakehouse catalog token`)");
    }
    String[] parts = authorization.substring(7).trim().split("\\.", -1);
    if (parts.length != 3) {
      throw new Refused("the bearer token is not a JWT");
    }
    JsonNode header = json(parts[0]);
    if (!"RS256".equals(header.path("alg").asText())) {
      throw new Refused("the token is not signed with RS256");
    }
    try {
      Signature rsa = Signature.getInstance("SHA256withRSA");
      rsa.initVerify(key);
      rsa.update((parts[0] + "." + parts[1]).getBytes(StandardCharsets.US_ASCII));
      if (!rsa.verify(URL.decode(parts[2]))) {
        throw new Refused("the token's signature is not the server's");
      }
    } catch (GeneralSecurityException | IllegalArgumentException e) {
      throw new Refused("the token's signature is not the server's");
    }
    JsonNode claims = json(parts[1]);
    if (!issuer.equals(claims.path("iss").asText())) {
      throw new Refused("the token was not issued by " + issuer);
    }
    if (!claims.path("exp").canConvertToLong() || claims.path("exp").asLong() <= nowSeconds) {
      throw new Refused("the token has expired");
    }
    String principal = claims.hasNonNull("upn") ? claims.get("upn").asText() : claims.path("sub").asText();
    if (principal.isEmpty()) {
      throw new Refused("the token names no principal");
    }
    return principal;
  }

  private static JsonNode json(String part) throws Refused {
    try {
      JsonNode node = JSON.readTree(URL.decode(part));
      if (node == null || !node.isObject()) {
        throw new Refused("the bearer token is not a JWT");
      }
      return node;
    } catch (Refused e) {
      throw e;
    } catch (Exception e) {
      throw new Refused("the bearer token is not a JWT");
    }
  }
}
