from django.db import migrations

from memoryhub.core.fts import fulltext_index_sql, run_for_vendor

SQL = fulltext_index_sql(
    table="sessions_app_message", column="content", fts_table="sessions_app_message_fts", index="message_search_gin"
)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0001_initial")]

    operations = [
        migrations.RunPython(run_for_vendor(SQL), run_for_vendor(SQL, backward=True)),
    ]
