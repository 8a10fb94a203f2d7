package lakehouse.catalog;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Properties;

import org.junit.jupiter.api.Test;

class CatalogRulesTest {

  private static CatalogRules rules() {
    Properties props = new Properties();
    props.setProperty("rules.pipeline.write", "true");
    props.setProperty("rules.analyst.write", "false");
    props.setProperty("rules.analyst.hidden", "(?i)(^|[.])(bronze_[^.]*|[^.]*_quarantine)$");
    props.setProperty("rules.analyst.vend.s3.access-key-id", "analysts");
    props.setProperty("rules.analyst.vend.s3.secret-access-key", "reader-secret");
    props.setProperty("rules.ml.write", "false");
    props.setProperty("rules.ml.visible", "(?i)(^|[.])(ml_user_features|ml_training_set)$");
    return CatalogRules.from(props);
  }

  @Test
  void aReaderKeptToSomeTablesSeesOnlyThose() {
    CatalogRules rules = rules();
    assertTrue(rules.mayRead("ml", "shop.ml_user_features"));
    assertFalse(rules.mayRead("ml", "shop.gold_daily"));
    assertFalse(rules.mayRead("ml", "shop.ml_user_features_v2"));
    assertThrows(CatalogRules.Forbidden.class, () -> rules.checkWrite("ml", "commit to", "shop.ml_user_features"));
  }

  @Test
  void aWriterMayDoEverythingAndAReaderOnlyReadWhatIsNotHidden() {
    CatalogRules rules = rules();
    assertDoesNotThrow(() -> rules.checkWrite("pipeline", "commit to", "shop.bronze_events"));
    assertTrue(rules.mayRead("pipeline", "shop.bronze_events"));
    assertTrue(rules.mayRead("analyst", "shop.gold_daily"));
    assertFalse(rules.mayRead("analyst", "shop.bronze_events"));
    assertFalse(rules.mayRead("analyst", "shop.silver_orders_quarantine"));
    String said = assertThrows(CatalogRules.Forbidden.class,
        () -> rules.checkWrite("analyst", "commit to", "shop.gold_daily")).getMessage();
    assertTrue(said.contains("principal 'analyst' may not commit to shop.gold_daily"), said);
    said = assertThrows(CatalogRules.Forbidden.class, () -> rules.checkRead("analyst", "shop.BRONZE_x")).getMessage();
    assertTrue(said.contains("may not read shop.BRONZE_x"), said);
  }

  @Test
  void eachPrincipalIsHandedItsOwnStorageSettingsOnly() {
    CatalogRules rules = rules();
    assertEquals(java.util.Map.of("s3.access-key-id", "analysts", "s3.secret-access-key", "reader-secret"),
        rules.vended("analyst"));
    assertTrue(rules.vended("pipeline").isEmpty());
  }

  @Test
  void aPrincipalTheRulesDoNotNameMayDoNothing() {
    String said = assertThrows(CatalogRules.Forbidden.class, () -> rules().checkKnown("root")).getMessage();
    assertTrue(said.contains("'root' is not one of the catalog's principals (") && said.contains("analyst"), said);
    assertThrows(CatalogRules.Forbidden.class, () -> rules().mayRead("root", "shop.gold_daily"));
  }
}
