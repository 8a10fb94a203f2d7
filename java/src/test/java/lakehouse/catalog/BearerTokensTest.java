package lakehouse.catalog;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.Signature;
import java.util.Base64;

import org.junit.jupiter.api.Test;

class BearerTokensTest {

  private static final long NOW = 1_800_000_000L;
  private static final KeyPair KEYS = keys();
  private static final KeyPair OTHER = keys();

  private static KeyPair keys() {
    try {
      KeyPairGenerator generator = KeyPairGenerator.getInstance("RSA");
      generator.initialize(2048);
      return generator.generateKeyPair();
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private static String b64(String text) {
    return Base64.getUrlEncoder().withoutPadding().encodeToString(text.getBytes(StandardCharsets.UTF_8));
  }

  private static String token(PrivateKey key, String alg, String claims) throws Exception {
    String signed = b64("{\"alg\":\"" + alg + "\",\"typ\":\"JWT\"}") + "." + b64(claims);
    Signature rsa = Signature.getInstance("SHA256withRSA");
    rsa.initSign(key);
    rsa.update(signed.getBytes(StandardCharsets.US_ASCII));
    return signed + "." + Base64.getUrlEncoder().withoutPadding().encodeToString(rsa.sign());
  }

  private static String claims(String iss, String upn, long exp) {
    return "{\"iss\":\"" + iss + "\",\"sub\":\"" + upn + "\",\"upn\":\"" + upn + "\",\"exp\":" + exp + "}";
  }

  private final BearerTokens tokens = new BearerTokens(KEYS.getPublic(), "lakehouse-catalog");

  private String refusal(String header) {
    return assertThrows(BearerTokens.Refused.class, () -> tokens.principal(header, NOW)).getMessage();
  }

  @Test
  void aTokenSignedByTheServersKeyNamesItsPrincipal() throws Exception {
    String token = token(KEYS.getPrivate(), "RS256", claims("lakehouse-catalog", "analyst", NOW + 60));
    assertEquals("analyst", tokens.principal("Bearer " + token, NOW));
    assertEquals("analyst", tokens.principal("bearer " + token, NOW));
  }

  @Test
  void aTokenIsRefusedWhenAnyOfItsChecksFails() throws Exception {
    assertTrue(refusal(null).contains("bearer token is required"));
    assertTrue(refusal("Basic dXNlcjpwdw==").contains("bearer token is required"));
    assertTrue(refusal("Bearer not-a-jwt").contains("not a JWT"));
    assertTrue(refusal("Bearer " + token(OTHER.getPrivate(), "RS256", claims("lakehouse-catalog", "pipeline", NOW + 60)))
        .contains("signature"));
    assertTrue(refusal("Bearer " + token(KEYS.getPrivate(), "RS256", claims("lakehouse-catalog", "pipeline", NOW)))
        .contains("expired"));
    assertTrue(refusal("Bearer " + token(KEYS.getPrivate(), "RS256", claims("someone-else", "pipeline", NOW + 60)))
        .contains("not issued by lakehouse-catalog"));
    assertTrue(refusal("Bearer " + token(KEYS.getPrivate(), "HS256", claims("lakehouse-catalog", "pipeline", NOW + 60)))
        .contains("RS256"));
  }

  @Test
  void claimsChangedAfterSigningAreRefused() throws Exception {
    String[] parts = token(KEYS.getPrivate(), "RS256", claims("lakehouse-catalog", "analyst", NOW + 60)).split("\\.");
    String forged = parts[0] + "." + b64(claims("lakehouse-catalog", "pipeline", NOW + 60)) + "." + parts[2];
    assertTrue(refusal("Bearer " + forged).contains("signature"));
  }
}
