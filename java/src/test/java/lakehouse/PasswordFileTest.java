package lakehouse;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The SQL endpoint's sign-in from its users file (serving/users.py: FORMAT). The class keeps its failures,
 * remembered sign-ins and settings in static fields: each test signs in with user names and addresses of its own.
 */
class PasswordFileTest {
    // Written by serving/users.py's way (hashlib.pbkdf2_hmac, 1000 rounds, fixed salts): passwords "correct
    // horse" and "battery staple".
    static final String ALICE =
        "alice:pbkdf2_sha256$1000$MDEyMzQ1Njc4OWFiY2RlZg==$cBg8D2DungRB9k76szThf5ehfyBz991ay6PT8Srwk4M=";
    static final String BOB =
        "bob:pbkdf2_sha256$1200$ZmVkY2JhOTg3NjU0MzIxMA==$Pl70JFbIkytSlNk1hDiaFhNcpRgBQW3c+is/xbZuIJ0=";
    static final String NOT_A_LINE = "not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH";

    @TempDir
    Path dir;
    private Path users;
    private final PasswordFile signIn = new PasswordFile();

    @BeforeEach
    void endpoint() {
        users = dir.resolve("users");
        PasswordFile.configure(users.toString(), false);
        PasswordFile.ready();
    }

    /** A users file line as users.py's user_line writes it (a random salt, a 32-byte hash). */
    static String line(String name, String password) throws GeneralSecurityException {
        byte[] salt = new byte[16];
        new java.security.SecureRandom().nextBytes(salt);
        byte[] hash = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256")
            .generateSecret(new PBEKeySpec(password.toCharArray(), salt, 1000, 256)).getEncoded();
        return name + ":pbkdf2_sha256$1000$" + Base64.getEncoder().encodeToString(salt) + "$"
            + Base64.getEncoder().encodeToString(hash);
    }

    private void write(String... lines) throws IOException {
        Files.write(users, List.of(lines), UTF_8);
    }

    private String refused(String user, String password) {
        return assertThrows(AuthenticationException.class, () -> signIn.Authenticate(user, password)).getMessage();
    }

    private static void setAddress(String address) throws ReflectiveOperationException {
        Field field = PasswordFile.class.getDeclaredField("ADDRESS");
        field.setAccessible(true);
        @SuppressWarnings("unchecked")
        ThreadLocal<String> threadAddress = (ThreadLocal<String>) field.get(null);
        if (address == null) {
            threadAddress.remove();
        } else {
            threadAddress.set(address);
        }
    }

    @Test
    void eachUserIsReadWithTheRestOfItsLineBlankLinesAndSpacesAroundIgnored() {
        Map<String, String> expected = new LinkedHashMap<>();
        expected.put("alice", ALICE.substring("alice:".length()));
        expected.put("bob", BOB.substring("bob:".length()));
        expected.put("x_y.z@w-1", "pbkdf2_sha256$999999999$AAAA$AA==");
        assertEquals(expected, PasswordFile.parse(List.of("", ALICE, " \t", "\t " + BOB + " \t", "   ",
            "x_y.z@w-1:pbkdf2_sha256$999999999$AAAA$AA==")));
        assertEquals(Map.of(), PasswordFile.parse(List.of("", " ", "\t")));
    }

    @Test
    void anyOtherLineIsAnErrorThatNamesItsNumber() {
        String salt = "MDEyMzQ1Njc4OWFiY2RlZg==";
        String hash = "cBg8D2DungRB9k76szThf5ehfyBz991ay6PT8Srwk4M=";
        for (String line : List.of(
                "# a comment",
                "alice",
                "alice:",
                "al ice:pbkdf2_sha256$1000$" + salt + "$" + hash,
                "alice/x:pbkdf2_sha256$1000$" + salt + "$" + hash,
                "alice:pbkdf2_sha1$1000$" + salt + "$" + hash,
                "alice:pbkdf2_sha256$0$" + salt + "$" + hash,
                "alice:pbkdf2_sha256$01000$" + salt + "$" + hash,
                "alice:pbkdf2_sha256$1000000000$" + salt + "$" + hash,   // ten digits
                "alice:pbkdf2_sha256$-1$" + salt + "$" + hash,
                "alice:pbkdf2_sha256$1000$MDEyMzQ1Njc4OWFiY2RlZg$" + hash, // no padding
                BOB.replace("bob:", "alice:").replace('+', '-').replace('/', '_'),  // URL-safe base64
                "alice:pbkdf2_sha256$1000$$" + hash,
                "alice:pbkdf2_sha256$1000$" + salt + "$" + hash + "$",
                "alice:pbkdf2_sha256$1000$" + salt + " $" + hash,
                "alice : pbkdf2_sha256$1000$" + salt + "$" + hash)) {
            IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
                () -> PasswordFile.parse(List.of(BOB, line)), line);
            assertEquals("line 2: " + NOT_A_LINE, refused.getMessage(), line);
        }
    }

    @Test
    void aNameOnASecondLineIsAnErrorNamingBothLines() {
        IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
            () -> PasswordFile.parse(List.of(ALICE, "", BOB, "  " + ALICE.replace("$1000$", "$2000$"))));
        assertEquals("line 4: user alice is already on line 1", refused.getMessage());
        assertEquals(2, PasswordFile.parse(List.of(ALICE, ALICE.replace("alice:", "Alice:"))).size());
    }

    @Test
    void theRightPasswordSignsInAndNoOtherDoes() throws IOException {
        write(ALICE, BOB);
        assertDoesNotThrow(() -> signIn.Authenticate("alice", "correct horse"));
        assertDoesNotThrow(() -> signIn.Authenticate("bob", "battery staple"));
        assertEquals("sign-in refused for alice", refused("alice", "battery staple"));
        assertEquals("sign-in refused for alice", refused("alice", "correct horse "));
        assertEquals("sign-in refused for alice", refused("alice", ""));
        assertEquals("sign-in refused for carol", refused("carol", "correct horse"));
        assertEquals("sign-in refused", refused("alice", null));
        assertEquals("sign-in refused", refused(null, "correct horse"));
        assertEquals("sign-in refused for Alice", refused("Alice", "correct horse"));  // names are exact
    }

    @Test
    void theFileIsReadAtEachSignIn() throws Exception {
        write(line("gina", "first password"));
        assertDoesNotThrow(() -> signIn.Authenticate("gina", "first password"));
        assertEquals("sign-in refused for hank", refused("hank", "second password"));
        write(line("gina", "first password"), line("hank", "second password"));
        assertDoesNotThrow(() -> signIn.Authenticate("hank", "second password"));
        write(line("hank", "second password"));
        assertEquals("sign-in refused for gina", refused("gina", "first password"));  // even remembered
    }

    @Test
    void aChangedPasswordIsCheckedAnewNotTakenFromMemory() throws Exception {
        write(line("ivan", "old password"));
        assertDoesNotThrow(() -> signIn.Authenticate("ivan", "old password"));
        assertDoesNotThrow(() -> signIn.Authenticate("ivan", "old password"));  // remembered
        write(line("ivan", "new password"));
        assertEquals("sign-in refused for ivan", refused("ivan", "old password"));
        assertDoesNotThrow(() -> signIn.Authenticate("ivan", "new password"));
    }

    @Test
    void withNoUserOnlyAnEndpointOnThisMachineTakesAnyone() throws IOException {
        PasswordFile.configure(users.toString(), true);  // no file
        assertDoesNotThrow(() -> signIn.Authenticate("anyone", "anything"));
        assertDoesNotThrow(() -> signIn.Authenticate(null, null));
        write("", "  ");
        assertDoesNotThrow(() -> signIn.Authenticate("anyone", "anything"));
        write(BOB);
        assertEquals("sign-in refused for anyone", refused("anyone", "anything"));

        PasswordFile.configure(users.toString(), false);
        write("", "  ");
        assertEquals("sign-in refused: the endpoint has no users", refused("anyone", "anything"));
        Files.delete(users);
        assertEquals("sign-in refused: the endpoint has no users", refused("anyone", "anything"));
    }

    @Test
    void aMalformedFileRefusesEveryoneNamingTheLine() throws IOException {
        write(ALICE, "", "alice:pbkdf2_sha256$1000$secret");
        for (boolean open : new boolean[] {false, true}) {
            PasswordFile.configure(users.toString(), open);
            assertEquals("sign-in refused: the users file is malformed: line 3: " + NOT_A_LINE,
                refused("alice", "correct horse"));
        }
    }

    @Test
    void beforeTheEndpointIsReadyEveryoneIsRefused() throws Exception {
        write(ALICE);
        Field ready = PasswordFile.class.getDeclaredField("ready");
        ready.setAccessible(true);
        ready.setBoolean(null, false);
        try {
            assertEquals("sign-in refused: the endpoint is starting", refused("alice", "correct horse"));
        } finally {
            PasswordFile.ready();
        }
        assertDoesNotThrow(() -> signIn.Authenticate("alice", "correct horse"));
    }

    @Test
    void pastFiveFailuresAUserIsRefusedWithoutALookAtThePassword() throws Exception {
        write(line("judy", "judy's password"), line("kim", "kim's password"));
        for (int i = 0; i < PasswordFile.MAX_FAILURES - 1; i++) {
            assertEquals("sign-in refused for judy", refused("judy", "wrong " + i));
        }
        assertDoesNotThrow(() -> signIn.Authenticate("judy", "judy's password"));  // four: still in
        assertEquals("sign-in refused for judy", refused("judy", "wrong"));
        assertEquals("sign-in refused for judy: too many failed sign-ins of this user, try again in a minute",
            refused("judy", "judy's password"));
        assertDoesNotThrow(() -> signIn.Authenticate("kim", "kim's password"));  // another user is not
    }

    @Test
    void pastTwentyFailuresFromOneAddressEveryUserFromItIsRefused() throws Exception {
        write(line("lena", "lena's password"));
        try {
            setAddress("192.0.2.7");
            for (int i = 0; i < PasswordFile.MAX_ADDRESS_FAILURES - 1; i++) {  // four names each: no user's limit
                assertEquals("sign-in refused for guess" + i / 4, refused("guess" + i / 4, "wrong"));
            }
            assertDoesNotThrow(() -> signIn.Authenticate("lena", "lena's password"));  // nineteen: still in
            assertEquals("sign-in refused for guess9", refused("guess9", "wrong"));
            assertEquals("sign-in refused for lena: too many failed sign-ins from 192.0.2.7, try again in a minute",
                refused("lena", "lena's password"));
            setAddress("192.0.2.8");
            assertDoesNotThrow(() -> signIn.Authenticate("lena", "lena's password"));
        } finally {
            setAddress(null);
        }
    }
}
