package lakehouse;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.List;

import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The SQL endpoint's users and passwords: the file named by the system property lakehouse.serve.password.file,
 * one user a line as `name:pbkdf2_sha256$iterations$salt$hash` (salt and hash in base64), written by
 * `lakehouse serve --add-user`. Read at each sign-in, so a user added or removed counts at once.
 */
public class PasswordFile implements PasswdAuthenticationProvider {
    public static final String FILE = "lakehouse.serve.password.file";

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        String path = System.getProperty(FILE, "");
        if (path.isEmpty() || user == null || password == null) {
            throw new AuthenticationException("sign-in refused");
        }
        List<String> lines;
        try {
            lines = Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new AuthenticationException("sign-in refused: the password file cannot be read");
        }
        for (String line : lines) {
            int colon = line.indexOf(':');
            if (colon <= 0 || !line.substring(0, colon).equals(user)) {
                continue;
            }
            String[] parts = line.substring(colon + 1).trim().split("\\$");
            if (parts.length == 4 && parts[0].equals("pbkdf2_sha256") && matches(password, parts)) {
                return;
            }
            break;
        }
        throw new AuthenticationException("sign-in refused for " + user);
    }

    private static boolean matches(String password, String[] parts) {
        try {
            int iterations = Integer.parseInt(parts[1]);
            byte[] salt = Base64.getDecoder().decode(parts[2]);
            byte[] expected = Base64.getDecoder().decode(parts[3]);
            PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, expected.length * 8);
            byte[] got = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
            return MessageDigest.isEqual(got, expected);
        } catch (IllegalArgumentException | GeneralSecurityException e) {
            return false;
        }
    }
}
