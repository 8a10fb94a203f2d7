package lakehouse.catalog;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.iceberg.BaseTable;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.RetryableValidationException;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.LoadTableResponse;

/**
 * The REST protocol's multi-table commit (`POST /v1/transactions/commit`), all or nothing: every table's new
 * metadata is built from its current metadata (each requirement checked against it, each update applied) and
 * written as a new metadata file; then one transaction of the catalog's database moves every table's pointer, each
 * only if it still is the file this commit read (Iceberg's compare-and-swap, the layout of Iceberg's JDBC catalog).
 * Either every table moves or none does, also when the server dies halfway (its new metadata files are then
 * orphans, which orphan removal deletes). When a table moved meanwhile, the commit is decided again on its new
 * metadata, a few times, before it is refused with 409.
 */
public final class TransactionCommit {

  private static final int ATTEMPTS = 5;
  private static final Pattern VERSION = Pattern.compile("(\\d+)-[^/]*\\.metadata\\.json(?:\\.gz)?$");
  private static final String SWAP = "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
      + "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?";

  private record Staged(TableIdentifier table, TableOperations ops, String old, String next) {}

  private final Catalog catalog;
  private final String catalogName;
  private final String jdbcUrl;
  private final Map<String, String> props;

  public TransactionCommit(Catalog catalog, String catalogName, String jdbcUrl, Map<String, String> props) {
    this.catalog = catalog;
    this.catalogName = catalogName;
    this.jdbcUrl = jdbcUrl;
    this.props = props;
  }

  public void commit(CommitTransactionRequest request) {
    request.validate();
    String moved = null;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
      List<Staged> staged = new ArrayList<>();
      boolean published = false;
      try {
        for (UpdateTableRequest change : request.tableChanges()) {
          staged.add(stage(change));
        }
        moved = swap(staged);
        published = moved == null;
      } finally {
        if (!published) {
          drop(staged);  // nothing points at them: this attempt failed or lost the race
        }
      }
      if (published) {
        return;
      }
    }
    throw new CommitFailedException("%s moved while committing; gave up after %d attempts", moved, ATTEMPTS);
  }

  private Staged stage(UpdateTableRequest change) {
    TableIdentifier id = change.identifier();
    TableOperations ops = ((BaseTable) catalog.loadTable(id)).operations();
    TableMetadata base = ops.refresh();
    TableMetadata updated = decide(base, change);
    String old = base.metadataFileLocation();
    Matcher found = VERSION.matcher(old);
    int version = found.find() ? Integer.parseInt(found.group(1)) + 1 : 1;
    String next = ops.metadataFileLocation(String.format("%05d-%s.metadata.json", version, UUID.randomUUID()));
    TableMetadataParser.write(updated, ops.io().newOutputFile(next));
    return new Staged(id, ops, old, next);
  }

  /**
   * One table's commit (`POST /v1/namespaces/{ns}/tables/{table}`), as Iceberg's handlers make it (requirements
   * checked against the current metadata, updates applied, the pointer compare-and-swapped, decided again on the new
   * metadata when another commit won the swap) but with every added snapshot checked to be fresh ({@link
   * #checkFresh}). A create (its one requirement that the table does not exist) goes to Iceberg's handlers.
   */
  static LoadTableResponse commitTable(Catalog catalog, TableIdentifier id, UpdateTableRequest change) {
    if (change.requirements().stream().anyMatch(UpdateRequirement.AssertTableDoesNotExist.class::isInstance)) {
      return CatalogHandlers.updateTable(catalog, id, change);
    }
    TableOperations ops = ((BaseTable) catalog.loadTable(id)).operations();
    for (int attempt = 1; ; attempt++) {
      TableMetadata base = attempt == 1 ? ops.current() : ops.refresh();
      TableMetadata updated = decide(base, change);
      if (updated.changes().isEmpty()) {
        return LoadTableResponse.builder().withTableMetadata(base).build();
      }
      try {
        ops.commit(base, updated);
        return LoadTableResponse.builder().withTableMetadata(ops.current()).build();
      } catch (CommitFailedException e) {
        if (attempt == ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** A table's new metadata: the change's requirements checked against its current metadata, its updates applied. */
  private static TableMetadata decide(TableMetadata base, UpdateTableRequest change) {
    for (UpdateRequirement requirement : change.requirements()) {
      requirement.validate(base);  // CommitFailedException (409) when the table is not what the client decided on
    }
    checkFresh(base, change.updates());
    TableMetadata.Builder builder = TableMetadata.buildFrom(base);
    try {
      for (MetadataUpdate update : change.updates()) {
        update.applyTo(builder);
      }
    } catch (RetryableValidationException e) {  // a value behind the table's (a first row id): the client's to redo
      throw new CommitFailedException(e, "the table moved on, refresh and write again: %s", e.getMessage());
    }
    return builder.build();
  }

  /**
   * Refuses with 409 (the client refreshes and writes again) a snapshot numbered at or below the table's last
   * sequence number: it was written against an older state of the table. Iceberg's own handlers answer a stale
   * sequence number so only for a snapshot with a parent; a first snapshot of a new branch (no parent) written
   * against an older table is taken by the metadata builder, which then lowers the table's last sequence number and
   * either fails to build (400, the writer gives up) or, at an equal number, gives two snapshots one sequence number,
   * which decides wrongly which deletes apply to which files.
   */
  static void checkFresh(TableMetadata base, List<MetadataUpdate> updates) {
    if (base.formatVersion() < 2) {
      return;  // format 1 has no sequence numbers
    }
    for (MetadataUpdate update : updates) {
      if (update instanceof MetadataUpdate.AddSnapshot added
          && added.snapshot().sequenceNumber() <= base.lastSequenceNumber()) {
        throw new CommitFailedException(
            "snapshot %d was written against an older table (its sequence number %d, the table's last %d): "
                + "refresh and write it again", added.snapshot().snapshotId(), added.snapshot().sequenceNumber(),
            base.lastSequenceNumber());
      }
    }
  }

  /** Null when every pointer moved; else the first table that had moved meanwhile, and none moved. */
  private String swap(List<Staged> staged) {
    try (Connection db = DriverManager.getConnection(jdbcUrl, props.get("jdbc.user"), props.get("jdbc.password"))) {
      db.setAutoCommit(false);
      try (PreparedStatement update = db.prepareStatement(SWAP)) {
        for (Staged table : staged) {
          update.setString(1, table.next());
          update.setString(2, table.old());
          update.setString(3, catalogName);
          update.setString(4, String.join(".", table.table().namespace().levels()));
          update.setString(5, table.table().name());
          update.setString(6, table.old());
          if (update.executeUpdate() != 1) {
            db.rollback();
            return table.table().toString();
          }
        }
        db.commit();
        return null;
      } catch (SQLException | RuntimeException e) {
        db.rollback();
        throw e;
      }
    } catch (SQLException e) {
      throw new CommitFailedException(e, "the catalog's database refused the commit: %s", e.getMessage());
    }
  }

  private static void drop(List<Staged> staged) {
    for (Staged table : staged) {
      try {
        table.ops().io().deleteFile(table.next());
      } catch (RuntimeException ignored) {
        // an unreferenced metadata file is also found by orphan removal
      }
    }
  }
}
